// What every op of the op API (kernels/ops.h) accepts, as the strictest
// backend, the device, accepts it: dtype combinations (cuBLASLt's for the
// GEMMs, one dtype where a kernel reads every operand through one type),
// shapes, and the launch limits a shape can reach (grid y and z of 65535,
// a block of 1024 threads). kernels/ops_*.cc run the op's check before it
// dispatches to either backend, so a CPU run, which could widen any mix of
// dtypes to fp32, fails exactly where a GPU run would (docs/architecture.md, principle
// 7). A failed check is a bug in the caller: fatal, naming the op, the
// operands and what the device needs.
#ifndef TETRA_KERNELS_OP_CONTRACTS_H_
#define TETRA_KERNELS_OP_CONTRACTS_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/mla_key_value.h"
#include "kernels/op_types.h"

namespace tetra::ops {

// The router's device kernels keep a token's E scores in one block, a thread
// each, and its choices in a bit set of this many experts.
inline constexpr int kMaxRouterExperts = 1024;

void CheckLinear(const Tensor& x, const Tensor& w, const Tensor& y);
void CheckLinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                         const Tensor& dw, int64_t real_out);

// bias (width) against rows of y (N, width) (its gradient: dbias fp32, dy).
void CheckAddBias(const Tensor& bias, const Tensor& y);
void CheckBiasGradient(const Tensor& dy, const Tensor& dbias);

void CheckEmbedding(const Tensor& tokens, const Tensor& table, const Tensor& out);
void CheckEmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable);

void CheckRmsNorm(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd);
void CheckAddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& sum,
                     const Tensor& y, const Tensor& rstd);
void CheckRmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& dx, const Tensor& dw, const Tensor& dx_add);

// x (B, T, H, D): whole heads rotate (Rope), or only their last 2
// table.half_dim dims (DecoupledRope).
void CheckRope(const char* op, const Tensor& x, const RopeTable& table, bool whole_heads);
// Packed rows [q | k | v] against q (B,T,Hq,D), k and v (B,T,Hkv,D).
void CheckQkvRope(const char* op, const Tensor& qkv, const RopeTable& table, const Tensor& q,
                  const Tensor& k, const Tensor& v);
// wide (N, Ca + Cb) and its column blocks a (N, Ca), b (N, Cb).
void CheckColumnBlocks(const char* op, const Tensor& wide, const Tensor& a, const Tensor& b);
// MLA's kv (rows, H (Dn + Dv)), k_pe (rows, R), key (B, T, H, Dn + R),
// value (B, T, H, Dv); returns their sizes.
cpu::MlaKeyValueDims CheckMlaKeyValue(const char* op, const Tensor& kv, const Tensor& k_pe,
                                      const Tensor& key, const Tensor& value);

// `dout` and the gradients, when given, as out and q, k, v.
void CheckAttention(const char* op, const AttentionShape& s, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& lse,
                    const Tensor& dout = Tensor(), const Tensor& dq = Tensor(),
                    const Tensor& dk = Tensor(), const Tensor& dv = Tensor());
void CheckAttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                         const Tensor& lse);

// Elementwise SwiGLU: every operand one dtype and size.
void CheckSwiglu(const char* op, const std::vector<const Tensor*>& operands);
// The packed forms: gate_up (rows, 2 x width), out (rows, width), one
// dtype; returns {rows, width}.
std::pair<int64_t, int64_t> CheckSwigluPacked(const char* op, const Tensor& gate_up,
                                              const Tensor& out, const Tensor& dgate_up = Tensor());

void CheckCrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                       int64_t vocab_size);
void CheckCrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& target_logit);
void CheckCrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, const Tensor& row_max,
                             const Tensor& sum_exp);
void CheckCrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                           const Tensor& sum_exp);
void CheckCrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& sum_exp, const Tensor& dlogits);

// (N, E) fp32 scores or logits and, when defined, (N, k) int32 choices of
// `spec`'s router, and the spec itself.
void CheckRouter(const char* op, const RouterSpec& spec, const Tensor& scores,
                 const Tensor& expert);
void CheckRouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                     const Tensor& expert, const Tensor& weights);
void CheckRouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                                const Tensor& dweights, const Tensor& dscores);
void CheckRouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                               const Tensor& dlogits);
// The balance loss: `batch` sequences of `seq` tokens of `whole_seq` in
// (N, E) scores, (batch, 2E) fp64 statistics, dscores (undefined: none).
void CheckSequenceBalance(const char* op, const RouterSpec& spec, const Tensor& scores,
                          const Tensor& expert, int64_t batch, int64_t seq, int64_t whole_seq,
                          const Tensor& stats, const Tensor& dscores = Tensor());
void CheckCountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads);
void CheckUpdateRouterBias(const Tensor& loads, const Tensor& bias);

void CheckDispatchOrder(const Tensor& expert, const Tensor& weights, const Tensor& send_row,
                        const Tensor& send_token, const Tensor& expert_counts);
void CheckGatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
void CheckCombineRows(const Tensor& src, const Tensor& index, const Tensor& weights,
                      const Tensor& dst);
void CheckCombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                              const Tensor& weights, const Tensor& dsrc, const Tensor& dweights);

void CheckAdamW(const AdamWTensors& t);
// fp32 or bf16 tensors (fp64 too for Add).
void CheckFloat(const char* op, const Tensor& x);
void CheckAdd(const Tensor& x, const Tensor& y, const Tensor& out);
void CheckCast(const Tensor& src, const Tensor& dst);

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OP_CONTRACTS_H_
