// One Llama decoder block (pre-norm):
//   r = x + attn(input_layernorm(x));  out = r + mlp(post_attention_layernorm(r))
// where attn is Llama's attention, or with model.kv_lora_rank multi-head
// latent attention, and mlp the dense SwiGLU MLP, or with model.moe the
// mixture-of-experts MLP from layer first_k_dense_replace on (DeepSeek-V3).
// Activations between the attention and the MLP are in the residual layout:
// all B*T token rows on every tensor-parallel rank, or under sequence
// parallelism this rank's B*T/tp (model_parallelism.h).
#ifndef TETRA_MODEL_DECODER_BLOCK_H_
#define TETRA_MODEL_DECODER_BLOCK_H_

#include <memory>

#include "model/activation_slots.h"
#include "model/model_parallelism.h"
#include "model/moe_mlp_layer.h"
#include "model/rmsnorm_layer.h"
#include "model/sublayer.h"

namespace tetra {

class DecoderBlock : public Sublayer {
 public:
  // `balance`: an MoE layer's share of the model's router balance loss
  // (moe/router_balance.h), or null.
  DecoderBlock(ParameterStore& store, int layer, const ModelConfig& config,
               const LayerParallelism& parallelism = SingleRankParallelism(),
               RouterBalance* balance = nullptr);
  // x (rows, C) of pass.batch sequences of pass.seq tokens -> out (rows, C).
  // Keeps r and out, which the norms keep as their inputs, in `slot`
  // (activation_slots.h). The second form is a forward with gradients.
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) override;
  Tensor Forward(int slot, const Tensor& x, int64_t batch, int64_t seq, float grad_scale = 0.0f) {
    return Forward(slot, x, {.batch = batch, .seq = seq, .grad_scale = grad_scale});
  }
  // dout (rows, C) of the forward of `slot` -> dx (rows, C), written; valid
  // until this block's next backward.
  Tensor Backward(int slot, const Tensor& dout) override;
  // Selective recompute of the MLP's SwiGLU activations (dense, shared and
  // routed experts).
  void set_recompute_activation(bool recompute) override {
    mlp_->set_recompute_activation(recompute);
  }
  // The mixture-of-experts MLP; null in a dense block.
  MoeMlpLayer* moe() { return moe_; }

 private:
  struct Activations {
    Tensor residual, out;  // r and out
  };
  void ClearSlots() override { slots_.Clear(); }

  RmsNormLayer input_norm_;
  std::unique_ptr<Sublayer> attention_;  // AttentionLayer or MlaAttentionLayer
  RmsNormLayer post_attention_norm_;
  std::unique_ptr<Sublayer> mlp_;  // MlpLayer or MoeMlpLayer
  MoeMlpLayer* moe_ = nullptr;     // mlp_ in an MoE block, for its stats and bias
  ActivationSlots<Activations> slots_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_DECODER_BLOCK_H_
