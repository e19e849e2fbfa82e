// Self-attention of a Llama block: q/k/v projections, rotary embeddings,
// causal grouped-query attention, output projection (no biases).
#ifndef TETRA_MODEL_ATTENTION_LAYER_H_
#define TETRA_MODEL_ATTENTION_LAYER_H_

#include <string>

#include "kernels/op_types.h"
#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

class AttentionLayer {
 public:
  // `prefix` is e.g. "model.layers.3.self_attn".
  AttentionLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config);
  // x (B, T, C) -> y (B, T, C). Keeps q, k, v (after RoPE), the output and lse.
  const Tensor& Forward(const Tensor& x);
  // dy (B, T, C) -> dx (B, T, C), written; accumulates weight gradients.
  const Tensor& Backward(const Tensor& dy);

 private:
  int64_t q_heads_, kv_heads_, head_dim_;
  double rope_theta_;
  Parameter &q_proj_, &k_proj_, &v_proj_, &o_proj_;
  RopeTable rope_;
  Tensor x_, q_, k_, v_, attn_, lse_, y_;   // forward
  Tensor dattn_, dq_, dk_, dv_, dx_;        // backward
};

}  // namespace tetra

#endif  // TETRA_MODEL_ATTENTION_LAYER_H_
