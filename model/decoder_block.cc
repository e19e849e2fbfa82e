#include "model/decoder_block.h"

#include <string>

#include "kernels/ops.h"

namespace tetra {
namespace {
std::string LayerPrefix(int layer) { return "model.layers." + std::to_string(layer); }

bool IsMoeLayer(const ModelConfig& c, int layer) {
  return c.has_moe() && c.moe().n_routed_experts() > 0 && layer >= c.moe().first_k_dense_replace();
}
}  // namespace

DecoderBlock::DecoderBlock(ParameterStore& store, int layer, const ModelConfig& c,
                           const LayerParallelism& parallelism)
    : input_norm_(store, LayerPrefix(layer) + ".input_layernorm.weight", c.hidden_size(),
                  c.rms_norm_eps(), parallelism),
      attention_(store, LayerPrefix(layer) + ".self_attn", c, parallelism),
      post_attention_norm_(store, LayerPrefix(layer) + ".post_attention_layernorm.weight",
                           c.hidden_size(), c.rms_norm_eps(), parallelism) {
  if (IsMoeLayer(c, layer)) {
    moe_ = std::make_unique<MoeMlpLayer>(store, LayerPrefix(layer) + ".mlp", c, parallelism);
  } else {
    mlp_ = std::make_unique<MlpLayer>(store, LayerPrefix(layer) + ".mlp", c, parallelism);
  }
}

const Tensor& DecoderBlock::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq,
                                    float grad_scale) {
  Activations& a = slots_.ForForward(slot);
  EnsureShape(&a.residual, x.shape());
  EnsureShape(&a.out, x.shape());
  a.residual.CopyFrom(x);
  ops::Add(attention_.Forward(slot, input_norm_.Forward(slot, x), batch, seq), a.residual);
  a.out.CopyFrom(a.residual);
  const Tensor& h = post_attention_norm_.Forward(slot, a.residual);
  ops::Add(moe_ ? moe_->Forward(slot, h, batch, seq, grad_scale) : mlp_->Forward(slot, h), a.out);
  return a.out;
}

const Tensor& DecoderBlock::Backward(int slot, const Tensor& dout) {
  EnsureShape(&dresidual_, dout.shape());
  EnsureShape(&dx_, dout.shape());
  // d r = dout + norm2'(mlp'(dout))
  dresidual_.CopyFrom(dout);
  ops::Add(post_attention_norm_.Backward(slot, moe_ ? moe_->Backward(slot, dout)
                                                   : mlp_->Backward(slot, dout)),
           dresidual_);
  // d x = d r + norm1'(attn'(d r))
  dx_.CopyFrom(dresidual_);
  ops::Add(input_norm_.Backward(slot, attention_.Backward(slot, dresidual_)), dx_);
  return dx_;
}

void DecoderBlock::ReleaseSlots() {
  input_norm_.ReleaseSlots();
  attention_.ReleaseSlots();
  post_attention_norm_.ReleaseSlots();
  if (mlp_) mlp_->ReleaseSlots();
  if (moe_) moe_->ReleaseSlots();
  slots_.Clear();
}

}  // namespace tetra
