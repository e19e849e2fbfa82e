// Multi-head latent attention (DeepSeek-V3; Hugging Face's
// DeepseekV3Attention), the self-attention of a block when
// model.kv_lora_rank > 0. Per token x (C):
//   q  = q_b_proj(q_a_layernorm(q_a_proj(x)))   (or q_proj(x) without q_lora_rank)
//        H heads of [q_nope (Dn) | q_pe (R)]
//   [c_kv (L) | k_pe (R)] = kv_a_proj_with_mqa(x)
//   kv = kv_b_proj(kv_a_layernorm(c_kv))        H heads of [k_nope (Dn) | v (Dv)]
//   q_pe, k_pe rotated (decoupled RoPE, rope_interleave's layout); k_pe, one
//   per token, is every head's
//   y  = o_proj(attention([q_nope | q_pe], [k_nope | k_pe], v)),
// causal, scores scaled by MlaSoftmaxScale. The latent norms use eps 1e-6
// (kMlaLatentNormEps), as Hugging Face and DeepSeek-V3 do.
//
// Tensor-parallel as Megatron-LM's MLA: heads split (q_b_proj or q_proj and
// kv_b_proj column-parallel, o_proj row-parallel); the down projections
// q_a_proj and kv_a_proj_with_mqa and the latent norms are whole on every
// rank, and each rank's gradients of them come from its own heads only, so
// they are summed over the group (Parameter::grad_partial_over). The input
// enters and the output leaves the region as in AttentionLayer.
#ifndef TETRA_MODEL_MLA_ATTENTION_LAYER_H_
#define TETRA_MODEL_MLA_ATTENTION_LAYER_H_

#include <memory>
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

class MlaAttentionLayer : public Sublayer {
 public:
  // `prefix` is e.g. "model.layers.3.self_attn".
  MlaAttentionLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
                    const LayerParallelism& parallelism = SingleRankParallelism());
  // x: this rank's rows of the (B*T, C) activation (all, or under SP B*T/tp)
  // -> y, the same rows. Keeps the input, the latents, q, k, v, the output
  // and lse in `slot` (activation_slots.h).
  Tensor Forward(int slot, const Tensor& x, int64_t batch, int64_t seq);
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) override {
    return Forward(slot, x, pass.batch, pass.seq);
  }
  // dy of the forward of `slot` -> dx, written; accumulates weight gradients.
  Tensor Backward(int slot, const Tensor& dy) override;

 private:
  struct Activations {
    explicit Activations(const TensorParallelRegion& like)
        : entry(like.tp(), like.sequence_parallel()) {}
    TensorParallelRegion entry;
    Tensor x;                     // (B*T, C)
    Tensor q_latent, q_normed;    // (B*T, Rq): q_a_proj's output and its norm (q_lora_rank > 0)
    Tensor kv_latent, kv_normed;  // (B*T, L): c_kv and its norm
    Tensor q, k, attn;            // q, k (B, T, H/tp, Dn + R) roped; attn (B, T, H/tp, Dv)
    Tensor v, lse;                // v (B, T, H/tp, Dv); lse (B, H/tp, T)
  };
  AttentionShape Shape(int64_t batch, int64_t seq) const;
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override;

  int64_t heads_, nope_dim_, rope_dim_, v_dim_, kv_rank_;  // this rank's heads
  bool interleaved_;
  double softmax_scale_;
  // q_a_proj, q_a_layernorm, q_b_proj with q_lora_rank; else q_proj alone.
  Parameter* q_a_proj_ = nullptr;
  std::unique_ptr<RmsNormLayer> q_a_norm_;
  Parameter& q_proj_;  // q_b_proj or q_proj
  Parameter& kv_a_proj_;
  RmsNormLayer kv_a_norm_;
  Parameter &kv_b_proj_, &o_proj_;
  WeightGradients& weight_gradients_;
  TensorParallelRegion region_;
  RotaryTable rope_;
  ContextParallelAttention attention_;  // plain attention without context parallelism
  ActivationSlots<Activations> slots_;
  Tensor kv_, k_pe_, y_;  // forward scratch: kv_b_proj's output, the rotary key, o_proj's
  Tensor dattn_, dq_, dk_, dv_, dkv_, dk_pe_, dkv_normed_, dq_normed_, dx_;  // backward scratch
};

}  // namespace tetra

#endif  // TETRA_MODEL_MLA_ATTENTION_LAYER_H_
