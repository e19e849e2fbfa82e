#include "model/rmsnorm_layer.h"

#include "kernels/ops.h"

namespace tetra {

RmsNormLayer::RmsNormLayer(ParameterStore& store, const std::string& name, int64_t dim, float eps,
                           const LayerParallelism& parallelism)
    : weight_(store.Add(name, {dim}, Init::kOnes, 0.0, parallelism.Replicated())),
      eps_(eps),
      grad_group_(parallelism.sequence_parallel ? parallelism.tp : nullptr) {}

const Tensor& RmsNormLayer::Forward(const Tensor& x) {
  x_ = x;
  EnsureShape(&y_, x.shape());
  EnsureShape(&rstd_, {x.numel() / x.dim(-1)});
  ops::RmsNorm(x, weight_.value, eps_, y_, rstd_);
  return y_;
}

const Tensor& RmsNormLayer::Backward(const Tensor& dy) {
  EnsureShape(&dx_, x_.shape());
  AccumulateSummedGrad(weight_, grad_group_, &dweight_, [&](const Tensor& dw) {
    ops::RmsNormBackward(dy, x_, weight_.value, rstd_, dx_, dw);
  });
  return dx_;
}

}  // namespace tetra
