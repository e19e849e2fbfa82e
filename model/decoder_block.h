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

#include "model/activation_slots.h"
#include "model/attention_layer.h"
#include "model/mla_attention_layer.h"
#include "model/mlp_layer.h"
#include "model/model_parallelism.h"
#include "model/moe_mlp_layer.h"
#include "model/rmsnorm_layer.h"

namespace tetra {

class DecoderBlock {
 public:
  // `balance`: an MoE layer's share of the model's router balance loss
  // (moe/router_balance.h), or null.
  DecoderBlock(ParameterStore& store, int layer, const ModelConfig& config,
               const LayerParallelism& parallelism = SingleRankParallelism(),
               RouterBalance* balance = nullptr);
  // x (rows, C) of B = `batch` sequences of T = `seq` tokens -> out (rows, C).
  // Keeps r and out, which the norms keep as their inputs, in `slot`
  // (activation_slots.h). grad_scale: the weight of the cross-entropy sum in
  // the objective, which an MoE MLP's balance loss shares. `recompute`: the
  // second forward of activation recompute, which counts no MoE stats.
  const Tensor& Forward(int slot, const Tensor& x, int64_t batch, int64_t seq,
                        float grad_scale = 0.0f, bool recompute = false);
  // dout (rows, C) of the forward of `slot` -> dx (rows, C), written; valid
  // until this block's next backward.
  const Tensor& Backward(int slot, const Tensor& dout);
  // Frees every slot's activations and the layers' scratch; the next forward
  // allocates anew.
  void ReleaseActivations();
  // Frees only the scratch its sublayers share between slots (selective
  // recompute, after each backward: one block's at a time).
  void ReleaseScratch();
  // Selective recompute of the MLP's SwiGLU activations (dense, shared and
  // routed experts).
  void set_recompute_activations(bool recompute);
  // The mixture-of-experts MLP; null in a dense block.
  MoeMlpLayer* moe() { return moe_.get(); }

 private:
  struct Activations {
    Tensor residual, out;  // r and out
  };

  // The attention's forward and backward, whichever layer it is.
  Tensor AttentionForward(int slot, const Tensor& x, int64_t batch, int64_t seq);
  Tensor AttentionBackward(int slot, const Tensor& dy);

  RmsNormLayer input_norm_;
  std::unique_ptr<AttentionLayer> attention_;  // Llama attention
  std::unique_ptr<MlaAttentionLayer> mla_;     // multi-head latent attention
  RmsNormLayer post_attention_norm_;
  std::unique_ptr<MlpLayer> mlp_;     // dense blocks
  std::unique_ptr<MoeMlpLayer> moe_;  // MoE blocks
  ActivationSlots<Activations> slots_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_DECODER_BLOCK_H_
