#include "model/mlp_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {

MlpLayer::MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& c,
                   const LayerParallelism& parallelism)
    : MlpLayer(store, prefix, c, c.intermediate_size(), parallelism) {}

MlpLayer::MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& c,
                   int64_t intermediate_size, const LayerParallelism& parallelism)
    : intermediate_(intermediate_size / parallelism.tp_size()),
      gate_proj_(store.Add(prefix + ".gate_proj.weight", {intermediate_size, c.hidden_size()},
                           Init::kNormal, c.initializer_range(), parallelism.Column())),
      up_proj_(store.Add(prefix + ".up_proj.weight", {intermediate_size, c.hidden_size()},
                         Init::kNormal, c.initializer_range(), parallelism.Column())),
      down_proj_(store.Add(prefix + ".down_proj.weight", {c.hidden_size(), intermediate_size},
                           Init::kNormal, OutputProjectionStd(c), parallelism.Row())),
      store_(store),
      weight_gradients_(store.weight_gradients()),
      region_(*parallelism.tp, parallelism.sequence_parallel) {}

std::optional<StackedParameters> MlpLayer::GateUp() const {
  return store_.Stacked({&gate_proj_, &up_proj_});
}

Tensor MlpLayer::Forward(int slot, const Tensor& x) {
  Activations& a = slots_.ForForward(slot, region_);
  a.x = a.entry.Enter(x);
  const int64_t rows = a.x.numel() / a.x.dim(-1);
  EnsureShape(&y_, a.x.shape());
  if (const std::optional<StackedParameters> gate_up = GateUp()) {
    EnsureShape(&a.gate_up, {rows, 2 * intermediate_});
    ops::Linear(a.x, gate_up->compute, a.gate_up);
  } else {
    EnsureShape(&a.gate, {rows, intermediate_});
    EnsureShape(&a.up, {rows, intermediate_});
    ops::Linear(a.x, gate_proj_.compute, a.gate);
    ops::Linear(a.x, up_proj_.compute, a.up);
  }
  ops::Linear(Activation(a), down_proj_.compute, y_);
  if (recompute_activation_) act_ = Tensor();  // until the backward
  return region_.Exit(y_);
}

const Tensor& MlpLayer::Activation(Activations& a) {
  Tensor& act = recompute_activation_ ? act_ : a.act;
  EnsureShape(&act, {a.x.numel() / a.x.dim(-1), intermediate_});
  if (a.gate_up.defined()) {
    ops::SwigluPacked(a.gate_up, act);
  } else {
    ops::Swiglu(a.gate, a.up, act);
  }
  return act;
}

Tensor MlpLayer::Backward(int slot, const Tensor& dy) {
  Activations& a = slots_.ForBackward(slot);
  // Kept by the forward, or under selective recompute computed again.
  // A recomputed activation is scratch: a deferred W keeps its own copy.
  const Tensor act = recompute_activation_ ? weight_gradients_.Keep(Activation(a)) : a.act;
  EnsureShape(&dact_, act.shape());
  EnsureShape(&dx_, a.x.shape());
  WeightGradients& w = weight_gradients_;
  w.LinearBackward(w.Keep(region_.ExitBackward(dy)), act, down_proj_.compute, dact_,
                   down_proj_.grad);
  if (recompute_activation_) act_ = Tensor();
  if (const std::optional<StackedParameters> gate_up = GateUp()) {
    // One dW GEMM into both gradients' slots, one dx GEMM summing over both.
    EnsureShape(&dgate_up_, a.gate_up.shape());
    ops::SwigluPackedBackward(dact_, a.gate_up, dgate_up_);
    w.LinearBackward(w.Keep(dgate_up_), a.x, gate_up->compute, dx_, gate_up->grad);
  } else {
    EnsureShape(&dgate_, a.gate.shape());
    EnsureShape(&dup_, a.up.shape());
    ops::SwigluBackward(dact_, a.gate, a.up, dgate_, dup_);
    w.LinearBackward(w.Keep(dgate_), a.x, gate_proj_.compute, dx_, gate_proj_.grad);
    w.LinearBackward(w.Keep(dup_), a.x, up_proj_.compute, dx_, up_proj_.grad,
                     /*accumulate_dx=*/true);
  }
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
