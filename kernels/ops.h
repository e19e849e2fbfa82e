// The op API: every numeric op the layers use, on Tensors, dispatched by the
// tensors' device to the CPU reference kernels (kernels/cpu/) or, when built
// and placed there, the CUDA kernels. Layers are written once against this.
//
// Conventions: N = rows (tokens), fp32 unless stated, token ids int32. A
// float tensor may also be bf16 where the layers keep bf16 (activations, the
// weights' compute copies): the CPU then computes in fp32 and rounds the
// outputs, as the CUDA kernels do.
// Activation gradients are written; parameter gradients are accumulated (+=),
// because they sum over micro-batches.
#ifndef TETRA_KERNELS_OPS_H_
#define TETRA_KERNELS_OPS_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra::ops {

// y (N, out) = x (N, in) . w (out, in)^T   (Hugging Face weight layout)
void Linear(const Tensor& x, const Tensor& w, const Tensor& y);
// dw += dy^T x; dx = dy w (or dx += dy w when accumulate_dx). Either of dx and
// dw may be undefined: the input and weight halves of a split backward are
// the same two GEMMs as the whole one, so their results are bit-identical.
// With real_out in [0, out) only the first real_out outputs take part (a
// padded vocabulary's LM head): dy's first real_out columns and w's and
// dw's first real_out rows; dw's other rows are left as they are. -1: all.
void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx = false, int64_t real_out = -1);

// y (N, width) += bias (width) on every row: a linear layer's bias (Qwen2's
// q, k and v projections), one dtype for both.
void AddBias(const Tensor& bias, const Tensor& y);
// dbias (width, fp32) += the sum of dy (N, width)'s rows: the bias's
// gradient, each column summed in fp32 in row order.
void BiasGradient(const Tensor& dy, const Tensor& dbias);

// out (N, C) = table[tokens]; dtable[tokens] += dout. Ids outside
// [0, table rows) are a bug (checked).
void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out);
void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable);
// Vocabulary-parallel forms: `table` holds ids [vocab_begin, vocab_begin +
// table rows) of the whole vocabulary; a token outside that range gives a
// zero row of out and adds nothing to dtable.
void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out);
void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable);

// y = w * x * rsqrt(mean(x^2) + eps) over the last dim; rstd (N) saved.
void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd);
// The residual add fused into the norm: sum = x + delta, stored in x's dtype,
// then RmsNorm(sum, w, eps, y, rstd) of the stored sum; the same numbers as
// Add and RmsNorm, reading x and delta once.
void AddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& sum,
                const Tensor& y, const Tensor& rstd);
// dx = the input gradient, or with dx_add defined dx = dx_add + it (the
// residual's gradient; dx_add may be dx itself), with the numbers of a
// separate backward into a tensor of dx's dtype and an Add. dx may alias dy.
// Either of dx (with no dx_add) and dw may be undefined: the halves of a
// split backward, each computed exactly as in the whole one.
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& dx_add = Tensor());

// In place on x (B, T, H, D), rotate-half convention; table from MakeRopeTable.
void Rope(const Tensor& x, const RopeTable& table);
void RopeBackward(const Tensor& dx, const RopeTable& table);
// The fused q/k/v projection's output qkv (B*T, (Hq + 2 Hkv) D), each row a
// token's [q | k | v], split into q (B,T,Hq,D), k and v (B,T,Hkv,D) with q
// and k rotated as Rope does (the same bits on the CPU), in one pass; one
// dtype for all four.
void SplitQkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
                  const Tensor& v);
// Its adjoint: dqkv rows = [RopeBackward(dq) | RopeBackward(dk) | dv],
// written; dq, dk, dv unchanged.
void MergeQkvRopeBackward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const RopeTable& table, const Tensor& dqkv);
// Multi-head latent attention's decoupled RoPE (DeepSeek-V3), in place on x
// (B, T, H, D): only the last R = 2 table.half_dim dims of each head rotate,
// as Rope rotates a whole head. `interleaved` (Hugging Face's
// rope_interleave): those dims hold pairs (x[2i], x[2i+1]), moved to (i,
// i + R/2) before the rotation, so the result is in the rotate-half layout.
void DecoupledRope(const Tensor& x, const RopeTable& table, bool interleaved);
// The transpose, in place on dx.
void DecoupledRopeBackward(const Tensor& dx, const RopeTable& table, bool interleaved);
// Column blocks of row-major matrices, one dtype, exact copies:
// out (N, Ca + Cb) = [a (N, Ca) | b (N, Cb)] (multi-token prediction joins a
// token's embedding and hidden state so), and its adjoint, a and b = in's
// first Ca and last Cb columns.
void ConcatColumns(const Tensor& a, const Tensor& b, const Tensor& out);
void SplitColumns(const Tensor& in, const Tensor& a, const Tensor& b);
// MLA's per-head keys and values, one dtype: kv (B*T, H (Dn + Dv)), each
// head's [k_nope | v] as kv_b_proj writes them, and the shared rotary key
// k_pe (B*T, R) -> key (B, T, H, Dn + R) = [k_nope | k_pe], value (B, T, H, Dv).
void MlaSplitKeyValue(const Tensor& kv, const Tensor& k_pe, const Tensor& key, const Tensor& value);
// Its adjoint: dkv = [dkey's first Dn | dvalue] per head and dk_pe = the sum
// over heads of dkey's last R dims, both written.
void MlaMergeKeyValueBackward(const Tensor& dkey, const Tensor& dvalue, const Tensor& dkv,
                              const Tensor& dk_pe);

// Grouped-query attention (kernels/op_types.h's AttentionShape): q (B,T,Hq,D),
// k (B,Tk,Hkv,D), v (B,Tk,Hkv,Dv) -> out (B,T,Hq,Dv), lse (B,Hq,T) fp32, Tk =
// shape.keys(). Causal (query t sees keys 0..t; Tk must be T, checked) or,
// with shape.causal false, every query sees every key (no mask).
// The backward writes dq, dk, dv (shaped as q, k, v) from dout (B,T,Hq,Dv)
// and the given out and lse, never recomputing the lse: P = exp(scale s -
// lse), delta = rowsum(dout * out). So out and lse may be those of a larger
// attention whose keys include these (ring attention's merged out and lse),
// and the result is this block's share of that attention's gradients.
void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse);
void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);
// Merges two attentions of the same queries over disjoint key sets by their
// log-sum-exps (ring attention): out (B,T,H,Dv) fp32 and lse (B,H,T) fp32 hold one,
// part_out (B,T,H,Dv, fp32 or bf16) and part_lse (B,H,T) fp32 the other; afterwards
// out and lse hold the attention over both: lse' = log(exp(lse) + exp(part_lse)),
// out' = exp(lse - lse') out + exp(part_lse - lse') part_out.
// A side whose lse is -inf (no keys) adds nothing, whatever its out holds; a
// row with both -inf keeps its out and its lse -inf.
void AttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                    const Tensor& lse);

// out = silu(gate) * up, elementwise.
void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup);
// The packed forms, on the fused gate/up projection's output: gate_up
// (N, 2I) holds each row's gate, then its up; out and dout (N, I); dgate_up
// (N, 2I) receives each row's dgate, then its dup, and may alias gate_up.
// The same arithmetic per element as Swiglu and SwigluBackward.
void SwigluPacked(const Tensor& gate_up, const Tensor& out);
void SwigluPackedBackward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up);

// Logits of a padded vocabulary (the LM head's width rounded up for GEMM
// tiles): columns of ids >= vocab_size are padding, left out of the softmax,
// gradient 0.
// A negative target (kIgnoredTarget) leaves its row out: no loss,
// gradient 0.
// Sum over rows of -log softmax(logits)[target] over logits (N, W), ids
// [0, vocab_size) real (vocab_size <= W); when dlogits is defined it
// receives grad_scale * (softmax - onehot), and may be logits itself.
double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits, int64_t vocab_size);

// Vocabulary-parallel cross-entropy's local steps, which
// parallel/vocab_parallel_cross_entropy.h runs around its collectives: logits
// (N, W) hold ids [vocab_begin, vocab_begin + W) of a vocabulary of
// vocab_size (padding past it; a slice may be all padding); targets (N)
// int32 in [0, vocab_size) or ignored (checked). The same arithmetic as CrossEntropy,
// step by step.
// row_max (N) fp32: each row's largest logit; target_logit (N) fp32: the
// row's target's logit where this slice holds it, else 0.
void CrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& target_logit);
// sum_exp (N) fp64 = sum over the row of exp(logit - row_max).
void CrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, int64_t vocab_size,
                        const Tensor& row_max, const Tensor& sum_exp);
// Sum over rows not ignored of (row_max - target_logit) + log(sum_exp), in
// row order.
double CrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                        const Tensor& sum_exp);
// dlogits (N, W), may be logits: grad_scale x (softmax - onehot(target)) on
// this slice, softmax = exp(logit - row_max) / sum_exp.
void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& sum_exp,
                          float grad_scale, const Tensor& dlogits);

// The DeepSeek-V3 router (kernels/cpu/router.h for the arithmetic), N tokens,
// E experts, k choices, fp32 but for the int32 expert ids.
// scores (N, E) = sigmoid or softmax of logits (N, E).
void RouterScores(const RouterSpec& spec, const Tensor& logits, const Tensor& scores);
// expert (N, k) int32 and weights (N, k): group-limited top-k of scores + bias (E).
void RouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                const Tensor& expert, const Tensor& weights);
// dscores (N, E) += the gradient through the weights, given dweights (N, k).
void RouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                           const Tensor& dweights, const Tensor& dscores);
// dlogits (N, E) = the scores' Jacobian applied to dscores (N, E).
void RouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                          const Tensor& dlogits);
// DeepSeek-V3's sequence-wise balance loss in two steps, so that under
// context parallelism each sequence's statistics can be summed over the ranks
// holding its chunks in between. Here are `seq` tokens of each of `batch`
// sequences of `whole_seq` tokens (seq == whole_seq without context parallelism).
// stats (batch, 2E) fp64: per sequence f_i = E / (k whole_seq) x its choices of
// expert i (E values), then P_i = sum over its tokens here of s_i / sum_j s_j / whole_seq (E
// values).
void SequenceBalanceStats(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, const Tensor& stats);
// sum over sequences and experts of f_i P_i from `stats` (summed over the
// sequences' ranks); dscores (N, E), when defined, += grad_scale x its
// gradient with respect to these tokens' scores (f held constant).
double SequenceBalanceLoss(const RouterSpec& spec, const Tensor& scores, const Tensor& stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           const Tensor& dscores);
// loads (E) int32 += the choices of each expert.
void CountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads);
// bias (E) += speed x sign(mean load - load), loads (E) int32.
void UpdateRouterBias(const Tensor& loads, double speed, const Tensor& bias);

// Token dispatch (kernels/cpu/moe_dispatch.h): pairs p = t k + j.
// expert, weights (N, k) -> send_row (N, k) int32 (-1: dropped), send_token
// (N k) int32 of which the first M rows are used, expert_counts (E) int32;
// capacity < 0: every pair kept. M, the pairs kept, is the sum of
// expert_counts: on a device the caller reads the counts once, so the op
// itself never waits for the device.
void DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                   const Tensor& send_row, const Tensor& send_token, const Tensor& expert_counts);
// dst (M, C) row i = src row index[i], index (M) int32.
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
// dst (N, C) row t = sum over kept pairs of weights[t, j] x src row index[t, j]
// (undefined weights: the plain sum, the adjoint of GatherRows).
void CombineRows(const Tensor& src, const Tensor& index, const Tensor& weights, const Tensor& dst);
// CombineRows' backward, each src row the row of one pair (as send_row):
// dsrc (M, C) rows and dweights (N, k), written.
void CombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                         const Tensor& weights, const Tensor& dsrc, const Tensor& dweights);

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper);
// Every tensor of the list in one pass (one launch on the device), each with
// or without weight decay and with an optional bf16 copy of the new weights.
void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper);

double SumOfSquares(const Tensor& x);
// sum over k of weights[k] x SumOfSquares(xs[k]), fp32 tensors on one device:
// one pass over the list and one wait for the device, however long it is
// (the global gradient norm). On the CPU the same bits as one SumOfSquares
// per tensor added in list order.
double WeightedSumOfSquares(const std::vector<Tensor>& xs, const std::vector<double>& weights);
void Scale(const Tensor& x, float factor);
// Every tensor of the list times `factor` (fp32 tensors on one device): one
// pass, one launch per 48 tensors on the device (gradient clipping); on the
// CPU the bits of one Scale per tensor.
void ScaleMultiTensor(const std::vector<Tensor>& xs, float factor);
void Add(const Tensor& x, const Tensor& y);  // y += x; fp32 or bf16, or fp64 (sums of sums)
// out = x + y, one pass (out may be x or y); the numbers of a copy and an Add.
void Add(const Tensor& x, const Tensor& y, const Tensor& out);
// dst = src in dst's dtype (fp32 <-> bf16, round to nearest even), same device.
void Cast(const Tensor& src, const Tensor& dst);
// x (fp32) = init's std x standard normal draws, element by element its
// global index's (kernels/op_types.h): initial weights, drawn where they live.
void FillNormal(const Tensor& x, const NormalInit& init);

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OPS_H_
