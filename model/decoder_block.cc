#include "model/decoder_block.h"

#include <string>

#include "kernels/ops.h"

namespace tetra {
namespace {
std::string LayerPrefix(int layer) { return "model.layers." + std::to_string(layer); }
}  // namespace

DecoderBlock::DecoderBlock(ParameterStore& store, int layer, const ModelConfig& c,
                           const LayerParallelism& parallelism)
    : input_norm_(store, LayerPrefix(layer) + ".input_layernorm.weight", c.hidden_size(),
                  c.rms_norm_eps(), parallelism),
      attention_(store, LayerPrefix(layer) + ".self_attn", c, parallelism),
      post_attention_norm_(store, LayerPrefix(layer) + ".post_attention_layernorm.weight",
                           c.hidden_size(), c.rms_norm_eps(), parallelism),
      mlp_(store, LayerPrefix(layer) + ".mlp", c, parallelism) {}

const Tensor& DecoderBlock::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq) {
  Activations& a = slots_.ForForward(slot);
  EnsureShape(&a.residual, x.shape());
  EnsureShape(&a.out, x.shape());
  a.residual.CopyFrom(x);
  ops::Add(attention_.Forward(slot, input_norm_.Forward(slot, x), batch, seq), a.residual);
  a.out.CopyFrom(a.residual);
  ops::Add(mlp_.Forward(slot, post_attention_norm_.Forward(slot, a.residual)), a.out);
  return a.out;
}

const Tensor& DecoderBlock::Backward(int slot, const Tensor& dout) {
  EnsureShape(&dresidual_, dout.shape());
  EnsureShape(&dx_, dout.shape());
  // d r = dout + norm2'(mlp'(dout))
  dresidual_.CopyFrom(dout);
  ops::Add(post_attention_norm_.Backward(slot, mlp_.Backward(slot, dout)), dresidual_);
  // d x = d r + norm1'(attn'(d r))
  dx_.CopyFrom(dresidual_);
  ops::Add(input_norm_.Backward(slot, attention_.Backward(slot, dresidual_)), dx_);
  return dx_;
}

void DecoderBlock::ReleaseSlots() {
  input_norm_.ReleaseSlots();
  attention_.ReleaseSlots();
  post_attention_norm_.ReleaseSlots();
  mlp_.ReleaseSlots();
  slots_.Clear();
}

}  // namespace tetra
