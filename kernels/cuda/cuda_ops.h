// The CUDA implementations behind the op API (kernels/ops.h), on Tensors that
// live on the device; kernels/ops.cc dispatches here by device. Every kernel
// computes in fp32 and reads/writes activations in the tensors' dtype, fp32 or
// bf16 (mixed precision); statistics (RMSNorm rstd, attention lse), losses
// and parameter gradients are fp32. Work is enqueued on cuda::CurrentStream();
// the ops that return a number (CrossEntropy, the sums of squares) wait for it.
#ifndef TETRA_KERNELS_CUDA_CUDA_OPS_H_
#define TETRA_KERNELS_CUDA_CUDA_OPS_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra::cuda {

// cuBLASLt, fp32 accumulate. x, w: both fp32 or both bf16; y: fp32 or the
// inputs' dtype; dw: fp32 (accumulated) or the inputs' dtype. The backward
// takes the first real_out outputs only (0 <= real_out <= w's rows).
void Linear(const Tensor& x, const Tensor& w, const Tensor& y);
void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx, int64_t real_out);

// table and out share a dtype; dtable fp32 (atomic adds). With `sharded`,
// table rows are ids [vocab_begin, vocab_begin + rows) and other ids give zero
// rows; otherwise an id outside the table traps the kernel.
void Embedding(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, bool sharded,
               const Tensor& out);
void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, bool sharded,
                       const Tensor& dtable);

// x, w, y, dy, dx share a dtype; rstd and dw fp32 (dw accumulated).
// AddRmsNorm's delta and sum and the backward's dx_add (undefined: none)
// share it too.
void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd);
void AddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& sum,
                const Tensor& y, const Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& dx_add);

// In place on x (B, T, H, D); table.cos/sin fp32 on the device. The backward
// rotates by the opposite angle.
void Rope(const Tensor& x, const RopeTable& table, bool backward);
// qkv (B*T, (Hq + 2 Hkv) D) -> q (B,T,Hq,D), k, v (B,T,Hkv,D), q and k
// rotated; backward: dq, dk rotated back and dv into dqkv. One dtype.
void QkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
             const Tensor& v, bool backward);
// In place on x (B, T, H, D): each head's last 2 half_dim dims (the op API
// checked the shapes); interleaved pairs as ops::DecoupledRope.
void DecoupledRope(const Tensor& x, const RopeTable& table, bool interleaved, bool backward);
// Copies `columns` columns of every row, from column src_column of src (rows,
// Cs) to column dst_column of dst (rows, Cd), one dtype: ops::ConcatColumns
// and ops::SplitColumns.
void CopyColumns(const Tensor& src, int64_t src_column, const Tensor& dst, int64_t dst_column,
                 int64_t columns);
// ops::MlaSplitKeyValue and its adjoint (shapes checked by the op API), one
// dtype; `nope` key dims without position per head.
void MlaSplitKeyValue(const Tensor& kv, const Tensor& k_pe, int64_t nope, const Tensor& key,
                      const Tensor& value);
void MlaMergeKeyValueBackward(const Tensor& dkey, const Tensor& dvalue, int64_t nope,
                              const Tensor& dkv, const Tensor& dk_pe);

// Attention on the engine that takes the call (kernels/cuda/attention_engine.cc):
// cuDNN's fused attention, else tetra's own kernel (kernels/cuda/attention.cu),
// else a fatal error naming why neither can; the engine of each shape and
// direction is logged once.
void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse);
void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);
// ops::AttentionMerge (the op API checked shapes and dtypes): out (B,T,H,Dv)
// and lse (B,H,T) fp32, part_out as out in fp32 or bf16, part_lse as lse.
void AttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                    const Tensor& lse);

void AddBias(const Tensor& bias, const Tensor& y);
void BiasGradient(const Tensor& dy, const Tensor& dbias);
void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup);
void SwigluPacked(const Tensor& gate_up, const Tensor& out);
void SwigluPackedBackward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up);

// logits and dlogits (may alias) share a dtype; targets int32 on the device;
// columns from vocab_size on are padding.
double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits, int64_t vocab_size);

// The vocabulary-parallel cross-entropy's steps: logits share their dtype
// with dlogits; row_max, target_logit fp32, sum_exp fp64, targets int32.
void CrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& target_logit);
void CrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, int64_t vocab_size,
                        const Tensor& row_max, const Tensor& sum_exp);
double CrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                        const Tensor& sum_exp);
void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& sum_exp,
                          float grad_scale, const Tensor& dlogits);
// The router, fp32 (the router runs in fp32 in every precision).
void RouterScores(const RouterSpec& spec, const Tensor& logits, const Tensor& scores);
void RouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                const Tensor& expert, const Tensor& weights);
void RouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                           const Tensor& dweights, const Tensor& dscores);
void RouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                          const Tensor& dlogits);
// The balance loss's statistics (batch, 2E) fp64 on the device.
void SequenceBalanceStats(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, const Tensor& stats);
double SequenceBalanceLoss(const RouterSpec& spec, const Tensor& scores, const Tensor& stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           const Tensor& dscores);
void CountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads);
void UpdateRouterBias(const Tensor& loads, double speed, const Tensor& bias);
// Token dispatch: rows in the activations' dtype (src, dst, ddst, dsrc share
// it), weights and dweights fp32, indices int32. DispatchOrder waits for the
// stream (its row count goes to the host).
int64_t DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                      const Tensor& send_row, const Tensor& send_token,
                      const Tensor& expert_counts);
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
void CombineRows(const Tensor& src, const Tensor& index, const Tensor& weights, const Tensor& dst);
void CombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                         const Tensor& weights, const Tensor& dsrc, const Tensor& dweights);
// One launch updates every tensor of the list (fp32 param, grad, m, v; the
// optional bf16 copy receives the updated weights rounded).
void AdamW(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper);

double SumOfSquares(const Tensor& x);  // fp32 or bf16, summed in fp64
// fp32 tensors; fp64 partial sums on the device, one copy to the host.
double WeightedSumOfSquares(const std::vector<Tensor>& xs, const std::vector<double>& weights);
void Scale(const Tensor& x, float factor);
void ScaleMultiTensor(const std::vector<Tensor>& xs, float factor);  // fp32 tensors
// out = x + y (out may be x or y); one dtype: fp32, bf16 or fp64.
void Add(const Tensor& x, const Tensor& y, const Tensor& out);
// dst = src converted (fp32 <-> bf16, or a plain copy for equal dtypes).
void Cast(const Tensor& src, const Tensor& dst);
// x fp32 = NormalInit's draws (kernels/cuda/normal_init.cu).
void FillNormal(const Tensor& x, const NormalInit& init);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_CUDA_OPS_H_
