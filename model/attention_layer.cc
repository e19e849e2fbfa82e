#include "model/attention_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
AttentionLayer::AttentionLayer(ParameterStore& store, const std::string& prefix,
                               const ModelConfig& c)
    : q_heads_(c.num_attention_heads()),
      kv_heads_(KeyValueHeads(c)),
      head_dim_(HeadDim(c)),
      rope_theta_(c.rope_theta()),
      q_proj_(store.Add(prefix + ".q_proj.weight", {q_heads_ * head_dim_, c.hidden_size()},
                        Init::kNormal, c.initializer_range())),
      k_proj_(store.Add(prefix + ".k_proj.weight", {kv_heads_ * head_dim_, c.hidden_size()},
                        Init::kNormal, c.initializer_range())),
      v_proj_(store.Add(prefix + ".v_proj.weight", {kv_heads_ * head_dim_, c.hidden_size()},
                        Init::kNormal, c.initializer_range())),
      o_proj_(store.Add(prefix + ".o_proj.weight", {c.hidden_size(), q_heads_ * head_dim_},
                        Init::kNormal, OutputProjectionStd(c))) {}

const Tensor& AttentionLayer::Forward(const Tensor& x) {
  const int64_t batch = x.dim(0), seq = x.dim(1);
  if (rope_.seq != seq) rope_ = MakeRopeTable(seq, head_dim_, rope_theta_);
  x_ = x;
  EnsureShape(&q_, {batch, seq, q_heads_, head_dim_});
  EnsureShape(&k_, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&v_, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&attn_, q_.shape());
  EnsureShape(&lse_, {batch, q_heads_, seq});
  EnsureShape(&y_, x.shape());
  ops::Linear(x, q_proj_.value, q_);
  ops::Linear(x, k_proj_.value, k_);
  ops::Linear(x, v_proj_.value, v_);
  ops::Rope(q_, rope_);
  ops::Rope(k_, rope_);
  ops::Attention({batch, seq, q_heads_, kv_heads_, head_dim_}, q_, k_, v_, attn_, lse_);
  ops::Linear(attn_.Reshape({batch * seq, q_heads_ * head_dim_}), o_proj_.value, y_);
  return y_;
}

const Tensor& AttentionLayer::Backward(const Tensor& dy) {
  const int64_t batch = x_.dim(0), seq = x_.dim(1);
  EnsureShape(&dattn_, attn_.shape());
  EnsureShape(&dq_, q_.shape());
  EnsureShape(&dk_, k_.shape());
  EnsureShape(&dv_, v_.shape());
  EnsureShape(&dx_, x_.shape());
  ops::LinearBackward(dy, attn_, o_proj_.value, dattn_, o_proj_.grad);
  ops::AttentionBackward({batch, seq, q_heads_, kv_heads_, head_dim_}, dattn_, q_, k_, v_, attn_,
                         lse_, dq_, dk_, dv_);
  ops::RopeBackward(dq_, rope_);
  ops::RopeBackward(dk_, rope_);
  ops::LinearBackward(dq_, x_, q_proj_.value, dx_, q_proj_.grad);
  ops::LinearBackward(dk_, x_, k_proj_.value, dx_, k_proj_.grad, /*accumulate_dx=*/true);
  ops::LinearBackward(dv_, x_, v_proj_.value, dx_, v_proj_.grad, /*accumulate_dx=*/true);
  return dx_;
}

}  // namespace tetra
