// Gradients that each rank of a group holds only a part of
// (Parameter::grad_partial_over: a norm weight under sequence parallelism, a
// key-value head shared by several tensor-parallel ranks), summed over their
// group once per step, after the data-parallel reduction, as Megatron-Core's
// finalize_model_grads sums sequence-parallel norm weights: per group, the
// parts of those parameters that this rank updates (its owned ranges of the
// flat gradients) are packed into one buffer and all-reduced in one call,
// instead of one blocking all-reduce per layer and micro-batch.
//
// Summing over the group commutes with the data-parallel sum, and the ranks of
// such a group lay out their flat buffers alike (tensor-parallel ranks hold
// slices of equal shapes in the same order), so they own the same ranges and
// pack the same elements.
#ifndef TETRA_OPTIMIZER_PARTIAL_GRADIENT_SUMS_H_
#define TETRA_OPTIMIZER_PARTIAL_GRADIENT_SUMS_H_

#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "parallel/flat_segment.h"

namespace tetra {

class PartialGradientSums {
 public:
  // The dense parameters of `store` (packed) with a grad_partial_over group
  // of several ranks, restricted to `owned` (ascending ranges of the flat
  // gradients this rank updates). `store` and the groups outlive this.
  PartialGradientSums(const ParameterStore& store, const std::vector<FlatRange>& owned);

  // Sums the parts over their groups, in place in the flat gradients
  // (collective over each group, in the order the parameters were registered).
  void Sum();

 private:
  struct Group {
    Communicator* comm;
    std::vector<FlatRange> ranges;  // of the flat gradients, ascending
    Tensor packed;                  // (sum of the ranges' sizes) fp32
  };

  Tensor flat_grads_;
  std::vector<Group> groups_;
};

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_PARTIAL_GRADIENT_SUMS_H_
