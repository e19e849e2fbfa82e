// One Llama decoder block (pre-norm):
//   r = x + attn(input_layernorm(x));  out = r + mlp(post_attention_layernorm(r))
#ifndef TETRA_MODEL_DECODER_BLOCK_H_
#define TETRA_MODEL_DECODER_BLOCK_H_

#include "model/attention_layer.h"
#include "model/mlp_layer.h"
#include "model/rmsnorm_layer.h"

namespace tetra {

class DecoderBlock {
 public:
  DecoderBlock(ParameterStore& store, int layer, const ModelConfig& config);
  // x (B, T, C) -> out (B, T, C).
  const Tensor& Forward(const Tensor& x);
  // dout (B, T, C) -> dx (B, T, C), written.
  const Tensor& Backward(const Tensor& dout);

 private:
  RmsNormLayer input_norm_;
  AttentionLayer attention_;
  RmsNormLayer post_attention_norm_;
  MlpLayer mlp_;
  Tensor residual_, out_;  // r and out
  Tensor dresidual_, dx_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_DECODER_BLOCK_H_
