#include "model/mla_attention_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {
namespace {

bool HasQueryLatent(const ModelConfig& c) { return c.q_lora_rank() > 0; }

}  // namespace

MlaAttentionLayer::MlaAttentionLayer(ParameterStore& store, const std::string& prefix,
                                     const ModelConfig& c, const LayerParallelism& parallelism)
    : heads_(LocalQueryHeads(c, parallelism.tp_size())),
      nope_dim_(c.qk_nope_head_dim()),
      rope_dim_(c.qk_rope_head_dim()),
      v_dim_(c.v_head_dim()),
      kv_rank_(c.kv_lora_rank()),
      interleaved_(c.rope_interleave()),
      softmax_scale_(MlaSoftmaxScale(c)),
      q_a_proj_(HasQueryLatent(c)
                    ? &store.Add(prefix + ".q_a_proj.weight", {c.q_lora_rank(), c.hidden_size()},
                                 Init::kNormal, c.initializer_range(), parallelism.Replicated())
                    : nullptr),
      q_a_norm_(HasQueryLatent(c) ? std::make_unique<RmsNormLayer>(
                                        store, prefix + ".q_a_layernorm.weight", c.q_lora_rank(),
                                        kMlaLatentNormEps, parallelism)
                                  : nullptr),
      q_proj_(store.Add(prefix + (HasQueryLatent(c) ? ".q_b_proj.weight" : ".q_proj.weight"),
                        {int64_t{c.num_attention_heads()} * QkHeadDim(c),
                         HasQueryLatent(c) ? c.q_lora_rank() : c.hidden_size()},
                        Init::kNormal, c.initializer_range(), parallelism.Column())),
      kv_a_proj_(store.Add(prefix + ".kv_a_proj_with_mqa.weight",
                           {kv_rank_ + rope_dim_, c.hidden_size()}, Init::kNormal,
                           c.initializer_range(), parallelism.Replicated())),
      kv_a_norm_(store, prefix + ".kv_a_layernorm.weight", kv_rank_, kMlaLatentNormEps,
                 parallelism),
      kv_b_proj_(store.Add(prefix + ".kv_b_proj.weight",
                           {int64_t{c.num_attention_heads()} * (nope_dim_ + v_dim_), kv_rank_},
                           Init::kNormal, c.initializer_range(), parallelism.Column())),
      o_proj_(store.Add(prefix + ".o_proj.weight",
                        {c.hidden_size(), int64_t{c.num_attention_heads()} * v_dim_}, Init::kNormal,
                        OutputProjectionStd(c), parallelism.Row())),
      weight_gradients_(store.weight_gradients()),
      region_(*parallelism.tp, parallelism.sequence_parallel),
      rope_(rope_dim_, c.rope_theta(), RotaryScaling(c), parallelism.context()),
      attention_(parallelism.context_group()) {
  // Every rank holds the down projections and latent norms whole, but its
  // gradients of them flow back from its own heads only.
  if (parallelism.tp_size() > 1) {
    kv_a_proj_.grad_partial_over = kv_a_norm_.weight().grad_partial_over = parallelism.tp;
    if (q_a_proj_ != nullptr) {
      q_a_proj_->grad_partial_over = q_a_norm_->weight().grad_partial_over = parallelism.tp;
    }
  }
  if (q_a_norm_) AddSublayer(*q_a_norm_);
  AddSublayer(kv_a_norm_);
}

AttentionShape MlaAttentionLayer::Shape(int64_t batch, int64_t seq) const {
  return {.batch = batch,
          .seq = seq,
          .q_heads = heads_,
          .kv_heads = heads_,
          .head_dim = nope_dim_ + rope_dim_,
          .v_head_dim = v_dim_,
          .softmax_scale = softmax_scale_};
}

Tensor MlaAttentionLayer::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq) {
  Activations& a = slots_.ForForward(slot, region_);
  const RopeTable& rope = rope_.For(seq);
  a.x = a.entry.Enter(x);
  const int64_t rows = batch * seq;
  TETRA_CHECK(a.x.numel() / a.x.dim(-1) == rows)
      << "attention input has " << a.x.numel() / a.x.dim(-1) << " rows, not " << batch << " x "
      << seq;
  EnsureShape(&a.q, {batch, seq, heads_, nope_dim_ + rope_dim_});
  EnsureShape(&a.k, a.q.shape());
  EnsureShape(&a.v, {batch, seq, heads_, v_dim_});
  EnsureShape(&a.attn, a.v.shape());
  EnsureShape(&a.lse, {batch, heads_, seq}, DType::kF32);  // fp32 statistics
  EnsureShape(&a.kv_latent, {rows, kv_rank_});
  EnsureShape(&kv_, {rows, heads_ * (nope_dim_ + v_dim_)});
  EnsureShape(&k_pe_, {batch, seq, 1, rope_dim_});
  EnsureShape(&y_, {rows, a.x.dim(-1)});

  // Queries: [q_nope | q_pe] per head, q_pe rotated in place.
  if (q_a_proj_ != nullptr) {
    EnsureShape(&a.q_latent, {rows, q_a_proj_->compute.dim(0)});
    ops::Linear(a.x, q_a_proj_->compute, a.q_latent);
    a.q_normed = q_a_norm_->Forward(slot, a.q_latent);
    ops::Linear(a.q_normed, q_proj_.compute, a.q);
  } else {
    ops::Linear(a.x, q_proj_.compute, a.q);
  }
  ops::DecoupledRope(a.q, rope, interleaved_);

  // Keys and values: kv_a_proj_with_mqa's rows [0, L) give the latent, rows
  // [L, L + R) the rotary key, each by its own GEMM into its own buffer.
  ops::Linear(a.x, kv_a_proj_.compute.Slice(0, kv_rank_), a.kv_latent);
  ops::Linear(a.x, kv_a_proj_.compute.Slice(kv_rank_, kv_rank_ + rope_dim_), k_pe_);
  a.kv_normed = kv_a_norm_.Forward(slot, a.kv_latent);
  ops::Linear(a.kv_normed, kv_b_proj_.compute, kv_);
  ops::DecoupledRope(k_pe_, rope, interleaved_);
  ops::MlaSplitKeyValue(kv_, k_pe_, a.k, a.v);

  attention_.Forward(Shape(batch, seq), a.q, a.k, a.v, a.attn, a.lse);
  ops::Linear(a.attn.Reshape({rows, heads_ * v_dim_}), o_proj_.compute, y_);
  return region_.Exit(y_);
}

Tensor MlaAttentionLayer::Backward(int slot, const Tensor& dy) {
  const Activations& a = slots_.ForBackward(slot);
  const int64_t batch = a.q.dim(0), seq = a.q.dim(1), rows = batch * seq;
  const RopeTable& rope = rope_.For(seq);
  EnsureShape(&dattn_, a.attn.shape());
  EnsureShape(&dq_, a.q.shape());
  EnsureShape(&dk_, a.k.shape());
  EnsureShape(&dv_, a.v.shape());
  EnsureShape(&dkv_, {rows, heads_ * (nope_dim_ + v_dim_)});
  EnsureShape(&dk_pe_, {batch, seq, 1, rope_dim_});
  EnsureShape(&dkv_normed_, a.kv_latent.shape());
  EnsureShape(&dx_, a.x.shape());
  WeightGradients& w = weight_gradients_;
  w.LinearBackward(w.Keep(region_.ExitBackward(dy)), a.attn.Reshape({rows, heads_ * v_dim_}),
                   o_proj_.compute, dattn_, o_proj_.grad);
  attention_.Backward(Shape(batch, seq), dattn_, a.q, a.k, a.v, a.attn, a.lse, dq_, dk_, dv_);

  // Keys and values back to the latent and the rotary key.
  ops::MlaMergeKeyValueBackward(dk_, dv_, dkv_, dk_pe_);
  ops::DecoupledRopeBackward(dk_pe_, rope, interleaved_);
  w.LinearBackward(w.Keep(dkv_), a.kv_normed, kv_b_proj_.compute, dkv_normed_, kv_b_proj_.grad);
  const Tensor& dkv_latent = kv_a_norm_.Backward(slot, dkv_normed_);
  w.LinearBackward(w.Keep(dkv_latent), a.x, kv_a_proj_.compute.Slice(0, kv_rank_), dx_,
                   kv_a_proj_.grad.Slice(0, kv_rank_));
  w.LinearBackward(w.Keep(dk_pe_), a.x, kv_a_proj_.compute.Slice(kv_rank_, kv_rank_ + rope_dim_),
                   dx_, kv_a_proj_.grad.Slice(kv_rank_, kv_rank_ + rope_dim_),
                   /*accumulate_dx=*/true);

  // Queries.
  ops::DecoupledRopeBackward(dq_, rope, interleaved_);
  if (q_a_proj_ != nullptr) {
    EnsureShape(&dq_normed_, a.q_latent.shape());
    w.LinearBackward(w.Keep(dq_), a.q_normed, q_proj_.compute, dq_normed_, q_proj_.grad);
    const Tensor& dq_latent = q_a_norm_->Backward(slot, dq_normed_);
    w.LinearBackward(w.Keep(dq_latent), a.x, q_a_proj_->compute, dx_, q_a_proj_->grad,
                     /*accumulate_dx=*/true);
  } else {
    w.LinearBackward(w.Keep(dq_), a.x, q_proj_.compute, dx_, q_proj_.grad, /*accumulate_dx=*/true);
  }
  return region_.EnterBackward(dx_);
}

void MlaAttentionLayer::ReleaseOwnScratch() {
  region_.Release();
  attention_.ReleaseScratch();
  ReleaseTensors({&kv_, &k_pe_, &y_, &dattn_, &dq_, &dk_, &dv_, &dkv_, &dk_pe_, &dkv_normed_,
                  &dq_normed_, &dx_});
}

}  // namespace tetra
