#include "model/attention_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
AttentionLayer::AttentionLayer(ParameterStore& store, const std::string& prefix,
                               const ModelConfig& c, const LayerParallelism& parallelism)
    : q_heads_(LocalQueryHeads(c, parallelism.tp_size())),
      kv_heads_(LocalKeyValueHeads(c, parallelism.tp_size())),
      head_dim_(HeadDim(c)),
      rope_theta_(c.rope_theta()),
      q_proj_(store.Add(prefix + ".q_proj.weight",
                        {c.num_attention_heads() * head_dim_, c.hidden_size()}, Init::kNormal,
                        c.initializer_range(), parallelism.Column())),
      k_proj_(store.Add(prefix + ".k_proj.weight", {KeyValueHeads(c) * head_dim_, c.hidden_size()},
                        Init::kNormal, c.initializer_range(),
                        parallelism.KeyValueColumn(KeyValueHeads(c)))),
      v_proj_(store.Add(prefix + ".v_proj.weight", {KeyValueHeads(c) * head_dim_, c.hidden_size()},
                        Init::kNormal, c.initializer_range(),
                        parallelism.KeyValueColumn(KeyValueHeads(c)))),
      o_proj_(store.Add(prefix + ".o_proj.weight",
                        {c.hidden_size(), c.num_attention_heads() * head_dim_}, Init::kNormal,
                        OutputProjectionStd(c), parallelism.Row())),
      region_(*parallelism.tp, parallelism.sequence_parallel),
      kv_replicas_(parallelism.kv_replicas) {}

Tensor AttentionLayer::Forward(const Tensor& x, int64_t batch, int64_t seq) {
  if (rope_.seq != seq) rope_ = MakeRopeTable(seq, head_dim_, rope_theta_);
  x_ = region_.Enter(x);
  TETRA_CHECK(x_.numel() / x_.dim(-1) == batch * seq)
      << "attention input has " << x_.numel() / x_.dim(-1) << " rows, not " << batch << " x "
      << seq;
  EnsureShape(&q_, {batch, seq, q_heads_, head_dim_});
  EnsureShape(&k_, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&v_, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&attn_, q_.shape());
  EnsureShape(&lse_, {batch, q_heads_, seq});
  EnsureShape(&y_, {batch * seq, x_.dim(-1)});
  ops::Linear(x_, q_proj_.value, q_);
  ops::Linear(x_, k_proj_.value, k_);
  ops::Linear(x_, v_proj_.value, v_);
  ops::Rope(q_, rope_);
  ops::Rope(k_, rope_);
  ops::Attention({batch, seq, q_heads_, kv_heads_, head_dim_}, q_, k_, v_, attn_, lse_);
  ops::Linear(attn_.Reshape({batch * seq, q_heads_ * head_dim_}), o_proj_.value, y_);
  return region_.Exit(y_);
}

Tensor AttentionLayer::Backward(const Tensor& dy) {
  const int64_t batch = q_.dim(0), seq = q_.dim(1);
  EnsureShape(&dattn_, attn_.shape());
  EnsureShape(&dq_, q_.shape());
  EnsureShape(&dk_, k_.shape());
  EnsureShape(&dv_, v_.shape());
  EnsureShape(&dx_, x_.shape());
  ops::LinearBackward(region_.ExitBackward(dy), attn_, o_proj_.value, dattn_, o_proj_.grad);
  ops::AttentionBackward({batch, seq, q_heads_, kv_heads_, head_dim_}, dattn_, q_, k_, v_, attn_,
                         lse_, dq_, dk_, dv_);
  ops::RopeBackward(dq_, rope_);
  ops::RopeBackward(dk_, rope_);
  ops::LinearBackward(dq_, x_, q_proj_.value, dx_, q_proj_.grad);
  // A key-value head shared by several ranks gets a part of its gradient
  // from each rank's query heads.
  AccumulateSummedGrad(k_proj_, kv_replicas_, &dk_w_, [&](const Tensor& dw) {
    ops::LinearBackward(dk_, x_, k_proj_.value, dx_, dw, /*accumulate_dx=*/true);
  });
  AccumulateSummedGrad(v_proj_, kv_replicas_, &dv_w_, [&](const Tensor& dw) {
    ops::LinearBackward(dv_, x_, v_proj_.value, dx_, dw, /*accumulate_dx=*/true);
  });
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
