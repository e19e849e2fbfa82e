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

const Tensor& DecoderBlock::Forward(const Tensor& x, int64_t batch, int64_t seq) {
  EnsureShape(&residual_, x.shape());
  EnsureShape(&out_, x.shape());
  residual_.CopyFrom(x);
  ops::Add(attention_.Forward(input_norm_.Forward(x), batch, seq), residual_);
  out_.CopyFrom(residual_);
  ops::Add(mlp_.Forward(post_attention_norm_.Forward(residual_)), out_);
  return out_;
}

const Tensor& DecoderBlock::Backward(const Tensor& dout) {
  EnsureShape(&dresidual_, dout.shape());
  EnsureShape(&dx_, dout.shape());
  // d r = dout + norm2'(mlp'(dout))
  dresidual_.CopyFrom(dout);
  ops::Add(post_attention_norm_.Backward(mlp_.Backward(dout)), dresidual_);
  // d x = d r + norm1'(attn'(d r))
  dx_.CopyFrom(dresidual_);
  ops::Add(input_norm_.Backward(attention_.Backward(dresidual_)), dx_);
  return dx_;
}

}  // namespace tetra
