// Full activation recompute (train.recompute FULL) of one decoder block of a
// pipeline chunk (LanguageModel::set_full_recompute). The block runs every
// forward in its activation slot 0, one set of activations whatever the
// micro-batches in flight, and frees them at once; only its input is kept,
// per slot. Its backward runs the forward again from that input (the same
// ops in the same order: bit-identical gradients), then the backward, and
// frees the activations again.
//
// Slot 0's output is overwritten by the next micro-batch, so the input of a
// chunk's later recomputed block is copied into the slot, and so is what
// leaves its last one, for the blocks after it. What is kept lives in the
// model's slots (RecomputeSlots), shared by the chunks as the model's slots
// are: a slot's next forward, on whichever chunk, reuses the buffers.
#ifndef TETRA_MODEL_RECOMPUTED_BLOCK_H_
#define TETRA_MODEL_RECOMPUTED_BLOCK_H_

#include <memory>
#include <vector>

#include "model/activation_slots.h"
#include "model/sublayer.h"

namespace tetra {

// What full recompute keeps of a micro-batch in one of the model's slots.
struct RecomputeKept {
  std::vector<Tensor> inputs;  // (rows, C) each recomputed block's; none after an evaluation
  Tensor output;               // (rows, C) a copy of what leaves the last recomputed block
  ForwardPass pass;            // what the second forwards take
};
using RecomputeSlots = ActivationSlots<RecomputeKept>;

class RecomputedBlock : public Sublayer {
 public:
  // `block` is the `index`-th of the `count` first blocks of its chunk that
  // are recomputed; `kept` the model's slots, which outlive it.
  RecomputedBlock(std::unique_ptr<Sublayer> block, int index, int count, RecomputeSlots& kept);
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) override;
  Tensor Backward(int slot, const Tensor& dy) override;
  void set_recompute_activation(bool recompute) override {
    block_->set_recompute_activation(recompute);
  }

 private:
  void ClearSlots() override {}  // what it keeps is in the model's slots

  std::unique_ptr<Sublayer> block_;
  int index_, count_;
  RecomputeSlots& kept_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_RECOMPUTED_BLOCK_H_
