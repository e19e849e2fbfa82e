#include "model/mlp_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {

MlpLayer::MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& c,
                   const LayerParallelism& parallelism)
    : intermediate_(c.intermediate_size() / parallelism.tp_size()),
      gate_proj_(store.Add(prefix + ".gate_proj.weight", {c.intermediate_size(), c.hidden_size()},
                           Init::kNormal, c.initializer_range(), parallelism.Column())),
      up_proj_(store.Add(prefix + ".up_proj.weight", {c.intermediate_size(), c.hidden_size()},
                         Init::kNormal, c.initializer_range(), parallelism.Column())),
      down_proj_(store.Add(prefix + ".down_proj.weight", {c.hidden_size(), c.intermediate_size()},
                           Init::kNormal, OutputProjectionStd(c), parallelism.Row())),
      region_(*parallelism.tp, parallelism.sequence_parallel) {}

Tensor MlpLayer::Forward(const Tensor& x) {
  x_ = region_.Enter(x);
  const int64_t rows = x_.numel() / x_.dim(-1);
  EnsureShape(&gate_, {rows, intermediate_});
  EnsureShape(&up_, {rows, intermediate_});
  EnsureShape(&act_, {rows, intermediate_});
  EnsureShape(&y_, x_.shape());
  ops::Linear(x_, gate_proj_.value, gate_);
  ops::Linear(x_, up_proj_.value, up_);
  ops::Swiglu(gate_, up_, act_);
  ops::Linear(act_, down_proj_.value, y_);
  return region_.Exit(y_);
}

Tensor MlpLayer::Backward(const Tensor& dy) {
  EnsureShape(&dact_, act_.shape());
  EnsureShape(&dgate_, gate_.shape());
  EnsureShape(&dup_, up_.shape());
  EnsureShape(&dx_, x_.shape());
  ops::LinearBackward(region_.ExitBackward(dy), act_, down_proj_.value, dact_, down_proj_.grad);
  ops::SwigluBackward(dact_, gate_, up_, dgate_, dup_);
  ops::LinearBackward(dgate_, x_, gate_proj_.value, dx_, gate_proj_.grad);
  ops::LinearBackward(dup_, x_, up_proj_.value, dx_, up_proj_.grad, /*accumulate_dx=*/true);
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
