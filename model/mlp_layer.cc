#include "model/mlp_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {

MlpLayer::MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& c)
    : intermediate_(c.intermediate_size()),
      gate_proj_(store.Add(prefix + ".gate_proj.weight", {intermediate_, c.hidden_size()},
                           Init::kNormal, c.initializer_range())),
      up_proj_(store.Add(prefix + ".up_proj.weight", {intermediate_, c.hidden_size()},
                         Init::kNormal, c.initializer_range())),
      down_proj_(store.Add(prefix + ".down_proj.weight", {c.hidden_size(), intermediate_},
                           Init::kNormal, OutputProjectionStd(c))) {}

const Tensor& MlpLayer::Forward(const Tensor& x) {
  const int64_t rows = x.numel() / x.dim(-1);
  x_ = x;
  EnsureShape(&gate_, {rows, intermediate_});
  EnsureShape(&up_, {rows, intermediate_});
  EnsureShape(&act_, {rows, intermediate_});
  EnsureShape(&y_, x.shape());
  ops::Linear(x, gate_proj_.value, gate_);
  ops::Linear(x, up_proj_.value, up_);
  ops::Swiglu(gate_, up_, act_);
  ops::Linear(act_, down_proj_.value, y_);
  return y_;
}

const Tensor& MlpLayer::Backward(const Tensor& dy) {
  EnsureShape(&dact_, act_.shape());
  EnsureShape(&dgate_, gate_.shape());
  EnsureShape(&dup_, up_.shape());
  EnsureShape(&dx_, x_.shape());
  ops::LinearBackward(dy, act_, down_proj_.value, dact_, down_proj_.grad);
  ops::SwigluBackward(dact_, gate_, up_, dgate_, dup_);
  ops::LinearBackward(dgate_, x_, gate_proj_.value, dx_, gate_proj_.grad);
  ops::LinearBackward(dup_, x_, up_proj_.value, dx_, up_proj_.grad, /*accumulate_dx=*/true);
  return dx_;
}

}  // namespace tetra
