#include "parallel/tensor_parallel.h"

#include "core/logging.h"
#include "core/profiler.h"

namespace tetra {
namespace {

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

// (rows, C) view of any activation.
Tensor AsRows(const Tensor& t) { return t.Reshape({Rows(t), t.dim(-1)}); }

// Rows of one rank's block of `t`; fatal unless the rows split evenly.
int64_t BlockRows(const Tensor& t, const Communicator& tp, const char* op) {
  const int64_t rows = Rows(t);
  TETRA_CHECK(rows % tp.size() == 0)
      << op << ": " << rows << " rows do not split into " << tp.size() << " equal blocks";
  return rows / tp.size();
}

Tensor AllGatherRows(const Tensor& x, Communicator& tp, Tensor* gathered) {
  if (tp.size() == 1) return AsRows(x);
  const int64_t rows = Rows(x), cols = x.dim(-1);
  EnsureShape(gathered, {rows * tp.size(), cols}, x.dtype(), x.device());
  const ScopedSpan span(SpanKind::kCommTp, "all_gather tp");
  tp.AllGather(x, *gathered);
  return *gathered;
}

Tensor ReduceScatterRows(const Tensor& y, Communicator& tp, Tensor* scattered, const char* op) {
  if (tp.size() == 1) return AsRows(y);
  const int64_t block = BlockRows(y, tp, op), cols = y.dim(-1);
  EnsureShape(scattered, {block, cols}, y.dtype(), y.device());
  const ScopedSpan span(SpanKind::kCommTp, "reduce_scatter tp");
  tp.ReduceScatter(y, *scattered, ReduceOp::kSum);
  return *scattered;
}

void AllReduceInPlace(const Tensor& t, Communicator& tp) {
  if (tp.size() == 1) return;
  const ScopedSpan span(SpanKind::kCommTp, "all_reduce tp");
  tp.AllReduce(t, t, ReduceOp::kSum);
}

}  // namespace

Tensor CopyToTensorParallelRegion(const Tensor& x, Communicator&) { return x; }

void CopyToTensorParallelRegionBackward(const Tensor& dx, Communicator& tp) {
  AllReduceInPlace(dx, tp);
}

void ReduceFromTensorParallelRegion(const Tensor& y, Communicator& tp) { AllReduceInPlace(y, tp); }

Tensor ReduceFromTensorParallelRegionBackward(const Tensor& dy, Communicator&) { return dy; }

Tensor GatherFromSequenceParallelRegion(const Tensor& x, Communicator& tp, Tensor* gathered) {
  return AllGatherRows(x, tp, gathered);
}

Tensor GatherFromSequenceParallelRegionBackward(const Tensor& dy, Communicator& tp,
                                                Tensor* scattered) {
  return ReduceScatterRows(dy, tp, scattered, "gather_from_sequence_parallel_region backward");
}

Tensor ReduceScatterToSequenceParallelRegion(const Tensor& y, Communicator& tp, Tensor* scattered) {
  return ReduceScatterRows(y, tp, scattered, "reduce_scatter_to_sequence_parallel_region");
}

Tensor ReduceScatterToSequenceParallelRegionBackward(const Tensor& dy, Communicator& tp,
                                                     Tensor* gathered) {
  return AllGatherRows(dy, tp, gathered);
}

Tensor ScatterToSequenceParallelRegion(const Tensor& x, Communicator& tp) {
  const int64_t block = BlockRows(x, tp, "scatter_to_sequence_parallel_region");
  return AsRows(x).Slice(tp.rank() * block, (tp.rank() + 1) * block);
}

Tensor ScatterToSequenceParallelRegionBackward(const Tensor& dx, Communicator& tp,
                                               Tensor* gathered) {
  return AllGatherRows(dx, tp, gathered);
}

TensorParallelRegion::TensorParallelRegion(Communicator& tp, bool sequence_parallel)
    : tp_(tp), sequence_parallel_(sequence_parallel) {}

Tensor TensorParallelRegion::Enter(const Tensor& x) {
  if (sequence_parallel_) return GatherFromSequenceParallelRegion(x, tp_, &input_);
  return CopyToTensorParallelRegion(x, tp_);
}

Tensor TensorParallelRegion::EnterBackward(const Tensor& dinput) {
  if (sequence_parallel_) return GatherFromSequenceParallelRegionBackward(dinput, tp_, &dx_);
  CopyToTensorParallelRegionBackward(dinput, tp_);
  return dinput;
}

Tensor TensorParallelRegion::Exit(const Tensor& y) {
  if (sequence_parallel_) return ReduceScatterToSequenceParallelRegion(y, tp_, &output_);
  ReduceFromTensorParallelRegion(y, tp_);
  return y;
}

Tensor TensorParallelRegion::ExitBackward(const Tensor& dy) {
  if (sequence_parallel_) return ReduceScatterToSequenceParallelRegionBackward(dy, tp_, &dy_);
  return ReduceFromTensorParallelRegionBackward(dy, tp_);
}

}  // namespace tetra
