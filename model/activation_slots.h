// ActivationSlots: what a layer's backward needs from its forward, kept per
// micro-batch "slot". A pipeline schedule (1F1B) runs the forwards of several
// micro-batches on a stage before their backwards, so every layer keeps one
// set of saved activations per micro-batch in flight; scratch used only within
// one call stays shared in the layer. Slots are made on first use and reused
// after (their buffers resized as needed), so a run that only ever uses slot 0
// holds one set, as a layer without slots would.
//
// A layer's ReleaseActivations frees its slots and its shared scratch
// (layer.h).
//
// Under sequence parallelism TensorParallelRegion::Enter gathers a layer's
// input into the region's own buffer, which the backward reads: a layer keeps
// one region per slot for Enter and shares one for Exit and the backward.
#ifndef TETRA_MODEL_ACTIVATION_SLOTS_H_
#define TETRA_MODEL_ACTIVATION_SLOTS_H_

#include <deque>
#include <initializer_list>

#include "core/logging.h"
#include "core/tensor.h"

namespace tetra {

template <typename State>
class ActivationSlots {
 public:
  // Slot `slot`, for a forward to fill; missing slots up to it are made as
  // State(args...).
  template <typename... Args>
  State& ForForward(int slot, Args&&... args) {
    TETRA_CHECK(slot >= 0) << "activation slot " << slot << " is negative";
    while (size() <= slot) slots_.emplace_back(args...);
    return slots_[slot];
  }
  // Slot `slot` as its forward left it, for the backward.
  State& ForBackward(int slot) {
    TETRA_CHECK(slot >= 0 && slot < size())
        << "backward of activation slot " << slot << ", which no forward has filled";
    return slots_[slot];
  }
  int size() const { return static_cast<int>(slots_.size()); }
  // Frees every slot.
  void Clear() { slots_.clear(); }

 private:
  std::deque<State> slots_;  // a deque keeps references to slots valid as more are made
};

// Frees a layer's shared scratch (Layer::ReleaseOwnScratch: activation
// recompute frees a block's memory between its uses; the next use allocates
// anew).
inline void ReleaseTensors(std::initializer_list<Tensor*> tensors) {
  for (Tensor* t : tensors) *t = Tensor();
}

}  // namespace tetra

#endif  // TETRA_MODEL_ACTIVATION_SLOTS_H_
