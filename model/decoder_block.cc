#include "model/decoder_block.h"

#include <string>

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
namespace {
std::string LayerPrefix(int layer) { return "model.layers." + std::to_string(layer); }

bool IsMoeLayer(const ModelConfig& c, int layer) {
  return c.has_moe() && c.moe().n_routed_experts() > 0 && layer >= c.moe().first_k_dense_replace();
}
}  // namespace

DecoderBlock::DecoderBlock(ParameterStore& store, int layer, const ModelConfig& c,
                           const LayerParallelism& parallelism, RouterBalance* balance)
    : input_norm_(store, LayerPrefix(layer) + ".input_layernorm.weight", c.hidden_size(),
                  c.rms_norm_eps(), parallelism),
      attention_(UsesMla(c) ? nullptr
                            : std::make_unique<AttentionLayer>(
                                  store, LayerPrefix(layer) + ".self_attn", c, parallelism)),
      mla_(UsesMla(c) ? std::make_unique<MlaAttentionLayer>(
                            store, LayerPrefix(layer) + ".self_attn", c, parallelism)
                      : nullptr),
      post_attention_norm_(store, LayerPrefix(layer) + ".post_attention_layernorm.weight",
                           c.hidden_size(), c.rms_norm_eps(), parallelism) {
  if (IsMoeLayer(c, layer)) {
    moe_ = std::make_unique<MoeMlpLayer>(store, LayerPrefix(layer) + "." + MoeNamesOf(c).block, c,
                                         parallelism, balance);
  } else {
    mlp_ = std::make_unique<MlpLayer>(store, LayerPrefix(layer) + ".mlp", c, parallelism);
  }
}

Tensor DecoderBlock::AttentionForward(int slot, const Tensor& x, int64_t batch, int64_t seq) {
  return mla_ ? mla_->Forward(slot, x, batch, seq) : attention_->Forward(slot, x, batch, seq);
}

Tensor DecoderBlock::AttentionBackward(int slot, const Tensor& dy) {
  return mla_ ? mla_->Backward(slot, dy) : attention_->Backward(slot, dy);
}

const Tensor& DecoderBlock::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq,
                                    float grad_scale, bool recompute) {
  Activations& a = slots_.ForForward(slot);
  EnsureShape(&a.residual, x.shape());
  EnsureShape(&a.out, x.shape());
  // r = x + attn(norm1(x)) written as norm2 reads it: one pass for both.
  const Tensor& h = post_attention_norm_.ForwardSum(
      slot, x, AttentionForward(slot, input_norm_.Forward(slot, x), batch, seq), a.residual);
  // out = r + mlp(h), written once.
  ops::Add(
      a.residual,
      moe_ ? moe_->Forward(slot, h, batch, seq, grad_scale, recompute) : mlp_->Forward(slot, h),
      a.out);
  return a.out;
}

const Tensor& DecoderBlock::Backward(int slot, const Tensor& dout) {
  // d r = dout + norm2'(mlp'(dout)), the add in norm2's backward pass.
  const Tensor& dresidual = post_attention_norm_.Backward(
      slot, moe_ ? moe_->Backward(slot, dout) : mlp_->Backward(slot, dout), /*dx_add=*/dout);
  // d x = d r + norm1'(attn'(d r))
  return input_norm_.Backward(slot, AttentionBackward(slot, dresidual), /*dx_add=*/dresidual);
}

void DecoderBlock::set_recompute_activations(bool recompute) {
  if (mlp_) mlp_->set_recompute_activation(recompute);
  if (moe_) moe_->set_recompute_activation(recompute);
}

void DecoderBlock::ReleaseActivations() {
  input_norm_.ReleaseActivations();
  if (attention_) attention_->ReleaseActivations();
  if (mla_) mla_->ReleaseActivations();
  post_attention_norm_.ReleaseActivations();
  if (mlp_) mlp_->ReleaseActivations();
  if (moe_) moe_->ReleaseActivations();
  slots_.Clear();
}

void DecoderBlock::ReleaseScratch() {
  input_norm_.ReleaseScratch();
  if (attention_) attention_->ReleaseScratch();
  if (mla_) mla_->ReleaseScratch();
  post_attention_norm_.ReleaseScratch();
  if (mlp_) mlp_->ReleaseScratch();
  if (moe_) moe_->ReleaseScratch();
}

}  // namespace tetra
