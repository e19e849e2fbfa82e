// Megatron-LM's conjugate communication pairs of tensor parallelism
// (megatron/core/tensor_parallel/mappings.py), each a named forward with its
// backward, over activations in their dtype and on their device, and the
// tensor-parallel (TP) group:
//
//   pair                                   forward              backward
//   CopyToTensorParallelRegion             identity             all-reduce (sum)
//   ReduceFromTensorParallelRegion         all-reduce (sum)     identity
//   GatherFromSequenceParallelRegion       all-gather rows      reduce-scatter rows
//   ReduceScatterToSequenceParallelRegion  reduce-scatter rows  all-gather rows
//   ScatterToSequenceParallelRegion        take own row block   all-gather rows
//
// Sequence parallelism (SP) splits an activation of N = B*T token rows, (N, C),
// into tp contiguous blocks of N/tp rows, block r on TP rank r. Token-wise ops
// (RMSNorm, residual adds) run on any partition of the tokens, so the rows of
// the flattened activation play the part of Megatron's sequence dim.
//
// In-place forms work on the tensor given; the others write into a caller-
// owned buffer (resized as needed, reused across micro-batches) and return the
// result. With a TP group of one rank every function returns its input, moves
// nothing and copies nothing. Shapes: any tensor is read as (rows, C), C its
// last dim; results that change the row count are (rows, C).
#ifndef TETRA_PARALLEL_TENSOR_PARALLEL_H_
#define TETRA_PARALLEL_TENSOR_PARALLEL_H_

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tetra {

// x, replicated on every TP rank -> x. Backward: dx (rows, C), a partial sum
// on each rank -> summed over TP, in place.
Tensor CopyToTensorParallelRegion(const Tensor& x, Communicator& tp);
void CopyToTensorParallelRegionBackward(const Tensor& dx, Communicator& tp);

// y (rows, C), a partial sum on each rank -> summed over TP, in place.
// Backward: dy, replicated -> dy.
void ReduceFromTensorParallelRegion(const Tensor& y, Communicator& tp);
Tensor ReduceFromTensorParallelRegionBackward(const Tensor& dy, Communicator& tp);

// x (N/tp, C), this rank's block -> (N, C), the blocks in rank order, in *gathered.
// Backward: dy (N, C), a partial sum on each rank -> (N/tp, C), this rank's
// block of the sum over TP, in *scattered.
Tensor GatherFromSequenceParallelRegion(const Tensor& x, Communicator& tp, Tensor* gathered);
Tensor GatherFromSequenceParallelRegionBackward(const Tensor& dy, Communicator& tp,
                                                Tensor* scattered);

// y (N, C), a partial sum on each rank -> (N/tp, C), this rank's block of the
// sum, in *scattered. Backward: dy (N/tp, C) -> (N, C) all-gathered, in *gathered.
Tensor ReduceScatterToSequenceParallelRegion(const Tensor& y, Communicator& tp, Tensor* scattered);
Tensor ReduceScatterToSequenceParallelRegionBackward(const Tensor& dy, Communicator& tp,
                                                     Tensor* gathered);

// x (N, C), replicated -> (N/tp, C), a view of this rank's block (no copy).
// Backward: dx (N/tp, C) -> (N, C) all-gathered, in *gathered.
Tensor ScatterToSequenceParallelRegion(const Tensor& x, Communicator& tp);
Tensor ScatterToSequenceParallelRegionBackward(const Tensor& dx, Communicator& tp,
                                               Tensor* gathered);

// The communication around a column-parallel -> row-parallel pair of linears
// (the input of Megatron's ColumnParallelLinear and the output of its
// RowParallelLinear), for activations in the residual layout: all N rows on
// every rank, or under SP this rank's N/tp. Owns its buffers; a result stays
// valid until the same method runs again.
class TensorParallelRegion {
 public:
  TensorParallelRegion(Communicator& tp, bool sequence_parallel);

  // x (residual layout) -> (N, C), the column-parallel linears' input:
  // CopyTo..., or under SP GatherFromSequenceParallelRegion.
  Tensor Enter(const Tensor& x);
  // d of that input (N, C), partial on each rank -> d x (residual layout).
  // Without SP the sum is taken in place on `dinput`.
  Tensor EnterBackward(const Tensor& dinput);
  // The row-parallel output (N, C), partial on each rank -> summed, in the
  // residual layout: ReduceFrom... in place on `y`, or under SP ReduceScatter...
  Tensor Exit(const Tensor& y);
  // d of the output (residual layout) -> (N, C).
  Tensor ExitBackward(const Tensor& dy);

  Communicator& tp() const { return tp_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // Frees the buffers (activation recompute between a layer's uses).
  void Release() { input_ = dx_ = output_ = dy_ = Tensor(); }

 private:
  Communicator& tp_;
  bool sequence_parallel_;
  Tensor input_, dx_, output_, dy_;  // SP buffers: (N, C), (N/tp, C), (N/tp, C), (N, C)
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_TENSOR_PARALLEL_H_
