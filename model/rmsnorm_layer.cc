#include "model/rmsnorm_layer.h"

#include "kernels/ops.h"

namespace tetra {

RmsNormLayer::RmsNormLayer(ParameterStore& store, const std::string& name, int64_t dim, float eps,
                           const LayerParallelism& parallelism)
    : weight_(store.Add(name, {dim}, Init::kOnes, 0.0, parallelism.Replicated())),
      weight_gradients_(store.weight_gradients()),
      eps_(eps) {
  if (parallelism.sequence_parallel) weight_.grad_partial_over = parallelism.tp;
}

RmsNormLayer::Activations& RmsNormLayer::SlotFor(int slot, const Tensor& x) {
  Activations& a = slots_.ForForward(slot);
  a.x = x;
  EnsureShape(&a.y, x.shape());
  EnsureShape(&a.rstd, {x.numel() / x.dim(-1)}, DType::kF32);  // fp32 statistics
  return a;
}

const Tensor& RmsNormLayer::Forward(int slot, const Tensor& x) {
  const Activations& a = SlotFor(slot, x);
  ops::RmsNorm(x, weight_.compute, eps_, a.y, a.rstd);
  return a.y;
}

const Tensor& RmsNormLayer::ForwardSum(int slot, const Tensor& x, const Tensor& delta,
                                       const Tensor& sum) {
  const Activations& a = SlotFor(slot, sum);
  ops::AddRmsNorm(x, delta, weight_.compute, eps_, sum, a.y, a.rstd);
  return a.y;
}

const Tensor& RmsNormLayer::Backward(int slot, const Tensor& dy, const Tensor& dx_add) {
  const Activations& a = slots_.ForBackward(slot);
  EnsureShape(&dx_, a.x.shape());
  weight_gradients_.RmsNormBackward(dy, a.x, weight_.compute, a.rstd, dx_, weight_.grad, dx_add);
  return dx_;
}

}  // namespace tetra
