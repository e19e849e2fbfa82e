// The CUDA implementations behind the op API (kernels/ops.h), on Tensors that
// live on the device; kernels/ops_*.cc dispatch here by device, having checked
// every shape and dtype (kernels/op_contracts.h), so these kernels trust them.
// Each op's CUDA entry has the op API's own signature, named here by
// decltype: the signature is written once, in ops.h, and a CUDA definition
// that drifted from it would fail to link.
//
// Every kernel computes in fp32 and reads/writes activations in the tensors'
// dtype, fp32 or bf16 (mixed precision); statistics (RMSNorm rstd, attention
// lse), losses and parameter gradients are fp32. Work is enqueued on
// cuda::CurrentStream(); the ops that return a number (the cross-entropies,
// the balance loss, the sums of squares) wait for it.
#ifndef TETRA_KERNELS_CUDA_CUDA_OPS_H_
#define TETRA_KERNELS_CUDA_CUDA_OPS_H_

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace tetra::cuda {

// cuBLASLt (kernels/cuda/gemm.cc), fp32 accumulate.
decltype(ops::Linear) Linear;
decltype(ops::LinearBackward) LinearBackward;
decltype(ops::AddBias) AddBias;
decltype(ops::BiasGradient) BiasGradient;

// dtable fp32 (atomic adds); an id outside an unsharded table traps the kernel.
decltype(ops::Embedding) Embedding;
decltype(ops::EmbeddingBackward) EmbeddingBackward;
decltype(ops::EmbeddingShard) EmbeddingShard;
decltype(ops::EmbeddingShardBackward) EmbeddingShardBackward;

decltype(ops::RmsNorm) RmsNorm;
decltype(ops::AddRmsNorm) AddRmsNorm;
decltype(ops::RmsNormBackward) RmsNormBackward;

// The tables' cos/sin fp32 on the device.
decltype(ops::Rope) Rope;
decltype(ops::RopeBackward) RopeBackward;
decltype(ops::SplitQkvRope) SplitQkvRope;
decltype(ops::MergeQkvRopeBackward) MergeQkvRopeBackward;
decltype(ops::DecoupledRope) DecoupledRope;
decltype(ops::DecoupledRopeBackward) DecoupledRopeBackward;
decltype(ops::MlaSplitKeyValue) MlaSplitKeyValue;
decltype(ops::MlaMergeKeyValueBackward) MlaMergeKeyValueBackward;
// Not an op: `columns` columns of every row, from column src_column of src
// (rows, Cs) to column dst_column of dst (rows, Cd), one dtype; the device
// half of ops::ConcatColumns and ops::SplitColumns.
void CopyColumns(const Tensor& src, int64_t src_column, const Tensor& dst, int64_t dst_column,
                 int64_t columns);

// On the engine that takes the call (kernels/cuda/attention_engine.cc):
// cuDNN's fused attention, else tetra's own kernel (kernels/cuda/attention.cu),
// else a fatal error naming why neither can; the engine of each shape and
// direction is logged once.
decltype(ops::Attention) Attention;
decltype(ops::AttentionBackward) AttentionBackward;
decltype(ops::AttentionMerge) AttentionMerge;

decltype(ops::Swiglu) Swiglu;
decltype(ops::SwigluBackward) SwigluBackward;
decltype(ops::SwigluPacked) SwigluPacked;
decltype(ops::SwigluPackedBackward) SwigluPackedBackward;

// The vocabulary-parallel steps keep sum_exp in fp64.
decltype(ops::CrossEntropy) CrossEntropy;
decltype(ops::CrossEntropyRowStats) CrossEntropyRowStats;
decltype(ops::CrossEntropySumExp) CrossEntropySumExp;
decltype(ops::CrossEntropyLoss) CrossEntropyLoss;
decltype(ops::CrossEntropyGradient) CrossEntropyGradient;

// The router runs in fp32 in every precision; the balance loss's statistics
// are fp64 on the device.
decltype(ops::RouterScores) RouterScores;
decltype(ops::RouterTopK) RouterTopK;
decltype(ops::RouterWeightsBackward) RouterWeightsBackward;
decltype(ops::RouterScoresBackward) RouterScoresBackward;
decltype(ops::SequenceBalanceStats) SequenceBalanceStats;
decltype(ops::SequenceBalanceLoss) SequenceBalanceLoss;
decltype(ops::CountExpertLoads) CountExpertLoads;
decltype(ops::UpdateRouterBias) UpdateRouterBias;
// Token dispatch.
decltype(ops::DispatchOrder) DispatchOrder;
decltype(ops::GatherRows) GatherRows;
decltype(ops::CombineRows) CombineRows;
decltype(ops::CombineRowsBackward) CombineRowsBackward;

// One launch per list (ops::AdamW is a list of one).
decltype(ops::AdamWMultiTensor) AdamWMultiTensor;
// fp64 partial sums on the device, one copy to the host.
decltype(ops::SumOfSquares) SumOfSquares;
decltype(ops::WeightedSumOfSquares) WeightedSumOfSquares;
decltype(ops::Scale) Scale;
decltype(ops::ScaleMultiTensor) ScaleMultiTensor;
// ops::Add's out form (its in-place form is Add(x, y, y)); overloaded, so
// written out.
void Add(const Tensor& x, const Tensor& y, const Tensor& out);
decltype(ops::Cast) Cast;
decltype(ops::FillNormal) FillNormal;

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_CUDA_OPS_H_
