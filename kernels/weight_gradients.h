// The backward of every op with weights split in two (Qi et al., "Zero Bubble
// Pipeline Parallelism", 2023): B, the gradient of its input, which the
// previous pipeline stage waits for, and W, the gradient of its weights, which
// a zero-bubble schedule (ZB-H1, DualPipeV) runs later to fill the bubble.
//
// A model's layers call the ops below with the WeightGradients of their
// ParameterStore. Normally (not deferring) each runs its whole backward at
// once, exactly the op it replaces. While deferring, each runs its B half and
// keeps its W half as work for later, in call order; running that work later
// makes bit-identical gradients, because the halves are the two independent
// computations of the whole op (kernels/ops.h) and every gradient receives
// its contributions in the same order.
//
// What the W work reads must survive until it runs: activations kept in a
// layer's slot do (a schedule reuses the slot only after W), a layer's scratch
// (an output gradient, a recomputed activation) does not: the layer passes
// such a tensor through Keep, which copies it while deferring, into a buffer
// from those whose W has run (steady state: no allocation, one copy).
#ifndef TETRA_KERNELS_WEIGHT_GRADIENTS_H_
#define TETRA_KERNELS_WEIGHT_GRADIENTS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tetra {

class WeightGradients {
 public:
  using Work = std::function<void()>;
  // One backward's W: its work in call order and the copies it reads.
  struct Deferred {
    std::vector<Work> work;
    std::vector<Tensor> kept;
  };

  // Until StopDeferring, W halves are appended to *deferred instead of run.
  void DeferInto(Deferred* deferred);
  void StopDeferring() { deferred_ = nullptr; }
  bool deferring() const { return deferred_ != nullptr; }
  // Runs deferred's work in order and empties it, keeping its copies'
  // buffers for later Keeps.
  void Run(Deferred& deferred);
  // Frees those buffers.
  void ReleaseBuffers() { free_.clear(); }

  // Runs `work` now, or while deferring appends it to the deferred work.
  void Add(Work work);
  // `t` itself, or while deferring a copy of it (scratch the backward
  // overwrites before the W work runs).
  Tensor Keep(const Tensor& t);

  // ops::LinearBackward: dx now, dw += dy^T x now or deferred.
  void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                      const Tensor& dw, bool accumulate_dx = false, int64_t real_out = -1);
  // ops::RmsNormBackward: dx now, dw deferred (dy kept first: dx may alias it).
  void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                       const Tensor& dx, const Tensor& dw, const Tensor& dx_add = Tensor());

 private:
  Deferred* deferred_ = nullptr;
  std::vector<Tensor> free_;  // copies whose W has run
};

}  // namespace tetra

#endif  // TETRA_KERNELS_WEIGHT_GRADIENTS_H_
