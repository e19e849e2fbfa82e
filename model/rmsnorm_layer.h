// RMSNorm with a learned scale (LlamaRMSNorm), statistics in fp32. The weight
// is replicated on every tensor-parallel rank; under sequence parallelism each
// rank normalises only its own token rows, so its weight gradient is a part
// of the sum over the TP group (Parameter::grad_partial_over), which the
// gradient finalisation takes, as Megatron-LM's finalize_model_grads does
// for sequence-parallel norms.
#ifndef TETRA_MODEL_RMSNORM_LAYER_H_
#define TETRA_MODEL_RMSNORM_LAYER_H_

#include <string>

#include "model/activation_slots.h"
#include "model/layer.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"

namespace tetra {

class RmsNormLayer : public Layer {
 public:
  RmsNormLayer(ParameterStore& store, const std::string& name, int64_t dim, float eps,
               const LayerParallelism& parallelism = SingleRankParallelism());
  // x (N, C) -> y (N, C), N this rank's rows. Keeps x (the caller's), y and
  // the row statistics in `slot` (activation_slots.h).
  const Tensor& Forward(int slot, const Tensor& x);
  // The residual add fused in: sum = x + delta, written into the caller's
  // `sum` (N, C), which the norm keeps as its input; returns y = norm(sum).
  const Tensor& ForwardSum(int slot, const Tensor& x, const Tensor& delta, const Tensor& sum);
  // dy (N, C) of the forward of `slot` -> dx (N, C), written; accumulates the
  // weight gradient. With dx_add (N, C), dx = dx_add + the norm's gradient:
  // a residual's gradient added in the same pass.
  const Tensor& Backward(int slot, const Tensor& dy, const Tensor& dx_add = Tensor());

  const Parameter& weight() const { return weight_; }
  Parameter& weight() { return weight_; }

 private:
  struct Activations {
    Tensor x, y, rstd;  // x, y (N, C), rstd (N)
  };
  // Slot `slot` keeping x as the norm's input, its y and rstd sized for it.
  Activations& SlotFor(int slot, const Tensor& x);
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override { ReleaseTensors({&dx_}); }

  Parameter& weight_;
  WeightGradients& weight_gradients_;
  float eps_;
  ActivationSlots<Activations> slots_;
  Tensor dx_;  // backward scratch
};

}  // namespace tetra

#endif  // TETRA_MODEL_RMSNORM_LAYER_H_
