// The SwiGLU MLP of a Llama block: down_proj(silu(gate_proj(x)) * up_proj(x)).
// Tensor-parallel: gate/up column-parallel and down row-parallel, so each
// rank computes intermediate / tp features; the input enters and the output
// leaves the tensor-parallel region through TensorParallelRegion.
// When this rank's gate and up slices sit back to back in the flat parameter
// buffers (ParameterStore::Stacked), they run as one (2I/tp, C) weight: one
// GEMM into a packed (N, 2I/tp) [gate | up] buffer, and in the backward one
// over the packed [dgate | dup], in place of two of each.
#ifndef TETRA_MODEL_MLP_LAYER_H_
#define TETRA_MODEL_MLP_LAYER_H_

#include <optional>
#include <string>

#include "model/activation_slots.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "model/sublayer.h"
#include "parallel/tensor_parallel.h"
#include "proto/config.pb.h"

namespace tetra {

class MlpLayer : public Sublayer {
 public:
  // `prefix` is e.g. "model.layers.3.mlp".
  MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
           const LayerParallelism& parallelism = SingleRankParallelism());
  // With `intermediate_size` features in place of the config's (an MoE
  // layer's shared experts).
  MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
           int64_t intermediate_size, const LayerParallelism& parallelism);
  // x (rows, C): this rank's token rows (all N, or under SP its N/tp) -> y,
  // the same rows. Keeps the input, gate, up and the activation in `slot`
  // (activation_slots.h).
  Tensor Forward(int slot, const Tensor& x);
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& /*pass*/) override {
    return Forward(slot, x);
  }
  // dy (rows of y) of the forward of `slot` -> dx (rows of x), written;
  // accumulates weight gradients.
  Tensor Backward(int slot, const Tensor& dy) override;
  // Selective recompute: the SwiGLU activation is not kept but computed
  // again from gate and up in the backward (the same op: bit-identical).
  void set_recompute_activation(bool recompute) override { recompute_activation_ = recompute; }

 private:
  struct Activations {
    explicit Activations(const TensorParallelRegion& like)
        : entry(like.tp(), like.sequence_parallel()) {}
    TensorParallelRegion entry;  // Enter's, one per slot (activation_slots.h)
    Tensor x, act;               // x (N, C), act (N, I/tp)
    Tensor gate_up;              // (N, 2I/tp), fused
    Tensor gate, up;             // (N, I/tp) each, not fused
  };

  // gate_proj and up_proj stacked into one (2I/tp, C) weight, or nullopt
  // when their slots do not touch (alignment padding between them).
  std::optional<StackedParameters> GateUp() const;
  // SwiGLU of the slot's gate and up (fused or not), into the slot's act or,
  // under selective recompute, the shared act_.
  const Tensor& Activation(Activations& a);
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override {
    region_.Release();
    ReleaseTensors({&y_, &act_, &dact_, &dgate_up_, &dgate_, &dup_, &dx_});
  }

  int64_t intermediate_;  // this rank's features
  Parameter &gate_proj_, &up_proj_, &down_proj_;
  const ParameterStore& store_;
  WeightGradients& weight_gradients_;
  TensorParallelRegion region_;  // Exit and the backward passes
  ActivationSlots<Activations> slots_;
  bool recompute_activation_ = false;
  Tensor y_;    // forward scratch (N, C)
  Tensor act_;  // the activation while it is in use, under selective recompute
  Tensor dact_, dgate_up_, dgate_, dup_, dx_;  // backward scratch
};

}  // namespace tetra

#endif  // TETRA_MODEL_MLP_LAYER_H_
