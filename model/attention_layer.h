// Self-attention of a Llama block: q/k/v projections, rotary embeddings,
// causal grouped-query attention, output projection; with Qwen2's q/k/v
// biases (model.qkv_bias) and Qwen3's per-head RMSNorm of queries and keys
// before RoPE (model.qk_norm). Under
// context parallelism the rows are this rank's chunks of each sequence,
// rotated at their positions, and attention is the ring over the context
// group (parallel/context_parallel_attention.h).
//
// Tensor-parallel (model_parallelism.h): q/k/v are column-parallel, so each
// rank computes its own query heads (heads / tp) and key-value heads (kv / tp,
// or one shared with kv_replicas when kv < tp), and o_proj is row-parallel;
// the input enters and the output leaves the tensor-parallel region through
// TensorParallelRegion (all-reduce, or under SP all-gather / reduce-scatter).
//
// Fused projections: when ParameterStore::Pack() laid this rank's q, k and v
// slices back to back (registered in a row, no alignment padding between),
// they are one ((Hq + 2 Hkv) D, C) weight: one GEMM writes packed [q | k | v]
// rows, which SplitQkvRope splits and rotates in the same pass, and the
// backward runs one dW and one dx GEMM on the packed gradient. Otherwise
// three projections and Rope: the same math. Biases and q/k norms take the
// three projections' path.
#ifndef TETRA_MODEL_ATTENTION_LAYER_H_
#define TETRA_MODEL_ATTENTION_LAYER_H_

#include <optional>
#include <string>

#include "kernels/op_types.h"
#include "model/activation_slots.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "model/rmsnorm_layer.h"
#include "model/rotary_table.h"
#include "model/sublayer.h"
#include "parallel/context_parallel_attention.h"
#include "parallel/tensor_parallel.h"
#include "proto/config.pb.h"

namespace tetra {

class AttentionLayer : public Sublayer {
 public:
  // `prefix` is e.g. "model.layers.3.self_attn".
  AttentionLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
                 const LayerParallelism& parallelism = SingleRankParallelism());
  // x: this rank's rows of the (B*T, C) activation, sequences of `seq` tokens
  // back to back (all B*T rows, or under SP its B*T/tp) -> y, the same rows.
  // Keeps the input, q, k, v (after RoPE), the output and lse in `slot`
  // (activation_slots.h).
  Tensor Forward(int slot, const Tensor& x, int64_t batch, int64_t seq);
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) override {
    return Forward(slot, x, pass.batch, pass.seq);
  }
  // dy (rows of y) of the forward of `slot` -> dx (rows of x), written;
  // accumulates weight gradients.
  Tensor Backward(int slot, const Tensor& dy) override;

 private:
  struct Activations {
    explicit Activations(const TensorParallelRegion& like)
        : entry(like.tp(), like.sequence_parallel()) {}
    TensorParallelRegion entry;    // Enter's, one per slot (activation_slots.h)
    Tensor x, q, k, v, attn, lse;  // x (B*T, C); q, attn (B, T, H/tp, D); lse (B, H/tp, T)
    Tensor q_in, k_in;             // under qk_norm: the projections' outputs, the norms' inputs
  };
  // The projections' outputs with their biases, as q, k and v (or under
  // qk_norm q_in and k_in, then normalised into q and k), rotated.
  void ProjectSeparately(int slot, Activations& a, const RopeTable& rope);
  // dq, dk, dv (rotated) -> dx_, with the biases' and norms' gradients.
  void ProjectSeparatelyBackward(int slot, const Activations& a, const RopeTable& rope);
  // The packed path, when nothing sits between the projections and RoPE.
  std::optional<StackedParameters> PackedQkv() const;
  // q, k, v's weights as one ((Hq + 2 Hkv) D, C) matrix when their slots
  // lie back to back (ParameterStore::Stacked); nullopt otherwise.
  std::optional<StackedParameters> StackedQkv() const;
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override {
    region_.Release();
    attention_.ReleaseScratch();
    ReleaseTensors({&y_, &dattn_, &dq_, &dk_, &dv_, &dx_, &qkv_});
  }

  int64_t q_heads_, kv_heads_, head_dim_;  // this rank's heads
  Parameter &q_proj_, &k_proj_, &v_proj_, &o_proj_;
  Parameter *q_bias_ = nullptr, *k_bias_ = nullptr, *v_bias_ = nullptr;  // model.qkv_bias
  std::optional<RmsNormLayer> q_norm_, k_norm_;                          // model.qk_norm
  const ParameterStore& store_;                                          // StackedQkv's views
  WeightGradients& weight_gradients_;
  TensorParallelRegion region_;  // Exit and the backward passes
  RotaryTable rope_;
  ContextParallelAttention attention_;  // plain attention without context parallelism
  ActivationSlots<Activations> slots_;
  Tensor y_;                          // forward scratch
  Tensor dattn_, dq_, dk_, dv_, dx_;  // backward scratch
  Tensor qkv_;  // (B*T, (Hq + 2 Hkv) D): the fused projection's output, then its gradient
};

}  // namespace tetra

#endif  // TETRA_MODEL_ATTENTION_LAYER_H_
