#include "model/attention_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
namespace {

// A (B, T, H, D) tensor as rows of one token's heads (B*T, H*D) or of one
// head (B*T*H, D).
Tensor TokenRows(const Tensor& t) { return t.Reshape({t.dim(0) * t.dim(1), t.dim(2) * t.dim(3)}); }
Tensor HeadRows(const Tensor& t) { return t.Reshape({t.numel() / t.dim(3), t.dim(3)}); }

}  // namespace

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
  if (c.qkv_bias()) {
    // Zeros, as transformers initialises a Linear's bias; split as the weights' rows.
    q_bias_ = &store.Add(prefix + ".q_proj.bias", {c.num_attention_heads() * head_dim_},
                         Init::kZeros, 0.0, parallelism.Column());
    k_bias_ = &store.Add(prefix + ".k_proj.bias", {KeyValueHeads(c) * head_dim_}, Init::kZeros, 0.0,
                         parallelism.KeyValueColumn(KeyValueHeads(c)));
    v_bias_ = &store.Add(prefix + ".v_proj.bias", {KeyValueHeads(c) * head_dim_}, Init::kZeros, 0.0,
                         parallelism.KeyValueColumn(KeyValueHeads(c)));
  }
  if (c.qk_norm()) {
    q_norm_.emplace(store, prefix + ".q_norm.weight", head_dim_,
                    static_cast<float>(c.rms_norm_eps()));
    k_norm_.emplace(store, prefix + ".k_norm.weight", head_dim_,
                    static_cast<float>(c.rms_norm_eps()));
    // Held whole by every rank, but each rank's gradient flows back from its own heads only.
    if (parallelism.tp_size() > 1) {
      q_norm_->weight().grad_partial_over = k_norm_->weight().grad_partial_over = parallelism.tp;
    }
    AddSublayer(*q_norm_);
    AddSublayer(*k_norm_);
  }
  // A key-value head shared by several ranks gets a part of its gradient
  // from each rank's query heads.
  if (parallelism.kv_replicas->size() > 1) {
    k_proj_.grad_partial_over = v_proj_.grad_partial_over = parallelism.kv_replicas;
    if (k_bias_ != nullptr)
      k_bias_->grad_partial_over = v_bias_->grad_partial_over = parallelism.kv_replicas;
  }
}

std::optional<StackedParameters> AttentionLayer::StackedQkv() const {
  return store_.Stacked({&q_proj_, &k_proj_, &v_proj_});
}

std::optional<StackedParameters> AttentionLayer::PackedQkv() const {
  if (q_bias_ != nullptr || q_norm_) return std::nullopt;
  return StackedQkv();
}

void AttentionLayer::ProjectSeparately(int slot, Activations& a, const RopeTable& rope) {
  Tensor& q = q_norm_ ? a.q_in : a.q;
  Tensor& k = q_norm_ ? a.k_in : a.k;
  if (q_norm_) {
    EnsureShape(&q, a.q.shape());
    EnsureShape(&k, a.k.shape());
  }
  ops::Linear(a.x, q_proj_.compute, q);
  ops::Linear(a.x, k_proj_.compute, k);
  ops::Linear(a.x, v_proj_.compute, a.v);
  if (q_bias_ != nullptr) {
    ops::AddBias(q_bias_->compute, TokenRows(q));
    ops::AddBias(k_bias_->compute, TokenRows(k));
    ops::AddBias(v_bias_->compute, TokenRows(a.v));
  }
  if (q_norm_) {
    a.q = q_norm_->Forward(slot, HeadRows(q)).Reshape(q.shape());
    a.k = k_norm_->Forward(slot, HeadRows(k)).Reshape(k.shape());
  }
  ops::Rope(a.q, rope);
  ops::Rope(a.k, rope);
}

void AttentionLayer::ProjectSeparatelyBackward(int slot, const Activations& a,
                                               const RopeTable& rope) {
  WeightGradients& w = weight_gradients_;
  ops::RopeBackward(dq_, rope);
  ops::RopeBackward(dk_, rope);
  Tensor dq = dq_, dk = dk_;
  if (q_norm_) {
    dq = q_norm_->Backward(slot, HeadRows(dq_)).Reshape(dq_.shape());
    dk = k_norm_->Backward(slot, HeadRows(dk_)).Reshape(dk_.shape());
  }
  if (q_bias_ != nullptr) {
    ops::BiasGradient(TokenRows(dq), q_bias_->grad);
    ops::BiasGradient(TokenRows(dk), k_bias_->grad);
    ops::BiasGradient(TokenRows(dv_), v_bias_->grad);
  }
  w.LinearBackward(w.Keep(dq), a.x, q_proj_.compute, dx_, q_proj_.grad);
  w.LinearBackward(w.Keep(dk), a.x, k_proj_.compute, dx_, k_proj_.grad, /*accumulate_dx=*/true);
  w.LinearBackward(w.Keep(dv_), a.x, v_proj_.compute, dx_, v_proj_.grad, /*accumulate_dx=*/true);
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
  if (const std::optional<StackedParameters> qkv = PackedQkv()) {
    EnsureShape(&qkv_, {batch * seq, qkv->compute.dim(0)});
    ops::Linear(a.x, qkv->compute, qkv_);
    ops::SplitQkvRope(qkv_, rope, a.q, a.k, a.v);
  } else {
    ProjectSeparately(slot, a, rope);
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
  attention_.Backward({batch, seq, q_heads_, kv_heads_, head_dim_}, dattn_, a.q, a.k, a.v, a.attn,
                      a.lse, dq_, dk_, dv_);
  // The packed gradient view spans q, k and v's own gradient slices, so a
  // kv_replicas partial sum (grad_partial_over) still finds k's and v's.
  if (const std::optional<StackedParameters> qkv = PackedQkv()) {
    EnsureShape(&qkv_, {batch * seq, qkv->compute.dim(0)});
    ops::MergeQkvRopeBackward(dq_, dk_, dv_, rope, qkv_);
    w.LinearBackward(w.Keep(qkv_), a.x, qkv->compute, dx_, qkv->grad);
  } else {
    ProjectSeparatelyBackward(slot, a, rope);
  }
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
