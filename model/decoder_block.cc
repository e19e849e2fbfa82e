#include "model/decoder_block.h"

#include <string>
#include <utility>

#include "kernels/ops.h"
#include "model/attention_layer.h"
#include "model/mla_attention_layer.h"
#include "model/mlp_layer.h"
#include "model/model_dims.h"

namespace tetra {
namespace {
std::string LayerPrefix(int layer) { return "model.layers." + std::to_string(layer); }

bool IsMoeLayer(const ModelConfig& c, int layer) {
  return c.has_moe() && c.moe().n_routed_experts() > 0 && layer >= c.moe().first_k_dense_replace();
}

std::unique_ptr<Sublayer> MakeAttention(ParameterStore& store, const std::string& prefix,
                                        const ModelConfig& c, const LayerParallelism& parallelism) {
  if (UsesMla(c)) return std::make_unique<MlaAttentionLayer>(store, prefix, c, parallelism);
  return std::make_unique<AttentionLayer>(store, prefix, c, parallelism);
}
}  // namespace

DecoderBlock::DecoderBlock(ParameterStore& store, int layer, const ModelConfig& c,
                           const LayerParallelism& parallelism, RouterBalance* balance)
    : input_norm_(store, LayerPrefix(layer) + ".input_layernorm.weight", c.hidden_size(),
                  c.rms_norm_eps(), parallelism),
      attention_(MakeAttention(store, LayerPrefix(layer) + ".self_attn", c, parallelism)),
      post_attention_norm_(store, LayerPrefix(layer) + ".post_attention_layernorm.weight",
                           c.hidden_size(), c.rms_norm_eps(), parallelism) {
  if (IsMoeLayer(c, layer)) {
    auto moe = std::make_unique<MoeMlpLayer>(store, LayerPrefix(layer) + "." + MoeNamesOf(c).block,
                                             c, parallelism, balance);
    moe_ = moe.get();
    mlp_ = std::move(moe);
  } else {
    mlp_ = std::make_unique<MlpLayer>(store, LayerPrefix(layer) + ".mlp", c, parallelism);
  }
  AddSublayer(input_norm_);
  AddSublayer(*attention_);
  AddSublayer(post_attention_norm_);
  AddSublayer(*mlp_);
}

Tensor DecoderBlock::Forward(int slot, const Tensor& x, const ForwardPass& pass) {
  Activations& a = slots_.ForForward(slot);
  EnsureShape(&a.residual, x.shape());
  EnsureShape(&a.out, x.shape());
  // r = x + attn(norm1(x)) written as norm2 reads it: one pass for both.
  const Tensor& h = post_attention_norm_.ForwardSum(
      slot, x, attention_->Forward(slot, input_norm_.Forward(slot, x), pass), a.residual);
  // out = r + mlp(h), written once.
  ops::Add(a.residual, mlp_->Forward(slot, h, pass), a.out);
  return a.out;
}

Tensor DecoderBlock::Backward(int slot, const Tensor& dout) {
  // d r = dout + norm2'(mlp'(dout)), the add in norm2's backward pass.
  const Tensor& dresidual =
      post_attention_norm_.Backward(slot, mlp_->Backward(slot, dout), /*dx_add=*/dout);
  // d x = d r + norm1'(attn'(d r))
  return input_norm_.Backward(slot, attention_->Backward(slot, dresidual), /*dx_add=*/dresidual);
}

}  // namespace tetra
