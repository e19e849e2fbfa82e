#include "model/recomputed_block.h"

#include <utility>

#include "core/logging.h"

namespace tetra {

RecomputedBlock::RecomputedBlock(std::unique_ptr<Sublayer> block, int index, int count,
                                 RecomputeSlots& kept)
    : block_(std::move(block)), index_(index), count_(count), kept_(kept) {
  AddSublayer(*block_);
}

Tensor RecomputedBlock::Forward(int slot, const Tensor& x, const ForwardPass& pass) {
  RecomputeKept& kept = kept_.ForForward(slot);
  if (index_ == 0) {
    kept.inputs.resize(pass.with_grad ? count_ : 0);
    kept.pass = pass;
  }
  // The chunk's input is this slot's already (the embedding's output or the
  // copy of the stage's input); a later block's is slot 0's, overwritten by
  // the next micro-batch.
  if (pass.with_grad && index_ == 0) kept.inputs[0] = x;
  if (pass.with_grad && index_ > 0) {
    EnsureShape(&kept.inputs[index_], x.shape());
    kept.inputs[index_].CopyFrom(x);
  }
  const Tensor out = block_->Forward(/*slot=*/0, x, pass);
  // Its memory goes back until the backward recomputes it; `out` keeps the
  // output alive for the next block.
  block_->ReleaseActivations();
  if (index_ + 1 < count_) return out;
  EnsureShape(&kept.output, out.shape());
  kept.output.CopyFrom(out);
  return kept.output;
}

Tensor RecomputedBlock::Backward(int slot, const Tensor& dy) {
  const RecomputeKept& kept = kept_.ForBackward(slot);
  TETRA_CHECK(index_ < static_cast<int>(kept.inputs.size()))
      << "recomputed backward in activation slot " << slot << " without a forward with gradients";
  ForwardPass again = kept.pass;
  again.recompute = true;
  block_->Forward(/*slot=*/0, kept.inputs[index_], again);
  const Tensor dx = block_->Backward(/*slot=*/0, dy);
  block_->ReleaseActivations();
  return dx;
}

}  // namespace tetra
