#include "model/attention_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
AttentionLayer::AttentionLayer(ParameterStore& store, const std::string& prefix,
                               const ModelConfig& c, const LayerParallelism& parallelism)
    : q_heads_(LocalQueryHeads(c, parallelism.tp_size())),
      kv_heads_(LocalKeyValueHeads(c, parallelism.tp_size())),
      head_dim_(HeadDim(c)),
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
      store_(store),
      weight_gradients_(store.weight_gradients()),
      region_(*parallelism.tp, parallelism.sequence_parallel),
      rope_(head_dim_, c.rope_theta(), RotaryScaling(c), parallelism.context()),
      attention_(parallelism.context_group()) {
  // A key-value head shared by several ranks gets a part of its gradient
  // from each rank's query heads.
  if (parallelism.kv_replicas->size() > 1) {
    k_proj_.grad_partial_over = v_proj_.grad_partial_over = parallelism.kv_replicas;
  }
}

std::optional<StackedParameters> AttentionLayer::StackedQkv() const {
  return store_.Stacked({&q_proj_, &k_proj_, &v_proj_});
}

Tensor AttentionLayer::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq) {
  Activations& a = slots_.ForForward(slot, region_);
  const RopeTable& rope = rope_.For(seq);
  a.x = a.entry.Enter(x);
  TETRA_CHECK(a.x.numel() / a.x.dim(-1) == batch * seq)
      << "attention input has " << a.x.numel() / a.x.dim(-1) << " rows, not " << batch << " x "
      << seq;
  EnsureShape(&a.q, {batch, seq, q_heads_, head_dim_});
  EnsureShape(&a.k, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&a.v, {batch, seq, kv_heads_, head_dim_});
  EnsureShape(&a.attn, a.q.shape());
  EnsureShape(&a.lse, {batch, q_heads_, seq}, DType::kF32);  // fp32 statistics
  EnsureShape(&y_, {batch * seq, a.x.dim(-1)});
  if (const std::optional<StackedParameters> qkv = StackedQkv()) {
    EnsureShape(&qkv_, {batch * seq, qkv->compute.dim(0)});
    ops::Linear(a.x, qkv->compute, qkv_);
    ops::SplitQkvRope(qkv_, rope, a.q, a.k, a.v);
  } else {
    ops::Linear(a.x, q_proj_.compute, a.q);
    ops::Linear(a.x, k_proj_.compute, a.k);
    ops::Linear(a.x, v_proj_.compute, a.v);
    ops::Rope(a.q, rope);
    ops::Rope(a.k, rope);
  }
  attention_.Forward({batch, seq, q_heads_, kv_heads_, head_dim_}, a.q, a.k, a.v, a.attn, a.lse);
  ops::Linear(a.attn.Reshape({batch * seq, q_heads_ * head_dim_}), o_proj_.compute, y_);
  return region_.Exit(y_);
}

Tensor AttentionLayer::Backward(int slot, const Tensor& dy) {
  const Activations& a = slots_.ForBackward(slot);
  const int64_t batch = a.q.dim(0), seq = a.q.dim(1);
  const RopeTable& rope = rope_.For(seq);
  EnsureShape(&dattn_, a.attn.shape());
  EnsureShape(&dq_, a.q.shape());
  EnsureShape(&dk_, a.k.shape());
  EnsureShape(&dv_, a.v.shape());
  EnsureShape(&dx_, a.x.shape());
  WeightGradients& w = weight_gradients_;
  w.LinearBackward(w.Keep(region_.ExitBackward(dy)), a.attn, o_proj_.compute, dattn_, o_proj_.grad);
  attention_.Backward({batch, seq, q_heads_, kv_heads_, head_dim_}, dattn_, a.q, a.k, a.v, a.attn, a.lse, dq_,
                      dk_, dv_);
  // The packed gradient view spans q, k and v's own gradient slices, so a
  // kv_replicas partial sum (grad_partial_over) still finds k's and v's.
  if (const std::optional<StackedParameters> qkv = StackedQkv()) {
    EnsureShape(&qkv_, {batch * seq, qkv->compute.dim(0)});
    ops::MergeQkvRopeBackward(dq_, dk_, dv_, rope, qkv_);
    w.LinearBackward(w.Keep(qkv_), a.x, qkv->compute, dx_, qkv->grad);
  } else {
    ops::RopeBackward(dq_, rope);
    ops::RopeBackward(dk_, rope);
    w.LinearBackward(w.Keep(dq_), a.x, q_proj_.compute, dx_, q_proj_.grad);
    w.LinearBackward(w.Keep(dk_), a.x, k_proj_.compute, dx_, k_proj_.grad, /*accumulate_dx=*/true);
    w.LinearBackward(w.Keep(dv_), a.x, v_proj_.compute, dx_, v_proj_.grad, /*accumulate_dx=*/true);
  }
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
