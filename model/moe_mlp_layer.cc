#include "model/moe_mlp_layer.h"

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {

MoeMlpLayer::MoeMlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& c,
                         const LayerParallelism& parallelism, RouterBalance* balance)
    : router_(RouterSpecFromConfig(c.moe())),
      aux_loss_alpha_(c.moe().aux_loss_alpha()),
      gate_(store.Add(prefix + ".gate.weight", {c.moe().n_routed_experts(), c.hidden_size()},
                      Init::kNormal, c.initializer_range(), parallelism.Replicated())),
      bias_(HasCorrectionBias(c.moe())
                ? &store.Add(prefix + ".gate.e_score_correction_bias", {c.moe().n_routed_experts()},
                             Init::kZeros, 0.0, parallelism.Replicated(), /*trainable=*/false)
                : nullptr),
      balance_(balance),
      weight_gradients_(store.weight_gradients()),
      dispatcher_(c.moe().n_routed_experts(), c.moe().num_experts_per_tok(),
                  c.moe().capacity_factor(), *parallelism.ep),
      experts_region_(*parallelism.tp, /*sequence_parallel=*/false),
      cp_(parallelism.context_group()) {
  TETRA_CHECK(!parallelism.sequence_parallel)
      << "MoE layers under sequence parallelism are not implemented";
  const int64_t width = c.moe().moe_intermediate_size(), hidden = c.hidden_size();
  const MoeNames names = MoeNamesOf(c);
  for (int i = 0; i < dispatcher_.local_experts(); ++i) {
    const std::string expert =
        prefix + ".experts." + std::to_string(dispatcher_.first_expert() + i) + ".";
    Parameter& gate = store.Add(expert + names.gate + ".weight", {width, hidden}, Init::kNormal,
                                c.initializer_range(), parallelism.Column());
    Parameter& up = store.Add(expert + names.up + ".weight", {width, hidden}, Init::kNormal,
                              c.initializer_range(), parallelism.Column());
    Parameter& down = store.Add(expert + names.down + ".weight", {hidden, width}, Init::kNormal,
                                OutputProjectionStd(c), parallelism.Row());
    gate.expert = up.expert = down.expert = true;
    expert_parameters_.push_back({&gate, &up, &down});
  }
  if (c.moe().n_shared_experts() > 0) {
    shared_ = std::make_unique<MlpLayer>(store, prefix + ".shared_experts", c,
                                         int64_t{c.moe().n_shared_experts()} * width, parallelism);
    AddSublayer(*shared_);
  }
  ResetStats();
}

const std::vector<ExpertWeights>& MoeMlpLayer::Experts() {
  // The parameters' views are final once ParameterStore::Pack has run, which
  // is before the first forward: build the list once.
  if (!experts_.empty()) return experts_;
  for (const ExpertParameters& p : expert_parameters_) {
    experts_.push_back(
        {p.gate->compute, p.up->compute, p.down->compute, p.gate->grad, p.up->grad, p.down->grad});
  }
  return experts_;
}

void MoeMlpLayer::RunExperts(Activations& a, const Tensor& x, bool recompute) {
  dispatcher_.Plan(a.routing, &a.plan);
  if (!recompute) dropped_ += a.plan.dropped;
  // With one expert-parallel rank the send order is the experts' order: the
  // permutation writes the micro-batch's grouped rows, and the experts its
  // output rows, with no exchange and no copy.
  const bool exchanges = dispatcher_.exchanges();
  Tensor& send = exchanges ? send_ : a.grouped;
  dispatcher_.Permute(a.plan, x, &send);
  dispatcher_.ToExperts(a.plan, send, &a.grouped);
  Tensor& y_grouped = exchanges ? y_grouped_ : a.y_send;
  GroupedSwigluForward(Experts(), a.plan.expert_rows, a.grouped, &a.experts, &y_grouped,
                       /*keep_activation=*/!recompute_activation_);
  dispatcher_.FromExperts(a.plan, experts_region_.Exit(y_grouped), &a.y_send);
}

Tensor MoeMlpLayer::Forward(int slot, const Tensor& x, int64_t batch, int64_t seq, float grad_scale,
                            bool recompute) {
  Activations& a = slots_.ForForward(slot);
  a.x = x;
  const int64_t n = x.dim(0), e = router_.num_experts;
  // The router runs in fp32 (docs/architecture.md): on its fp32 weight and the input
  // cast to fp32 once, which the gate's gradient reads again (into the slot's
  // own buffer, reused from micro-batch to micro-batch).
  if (x.dtype() == DType::kF32) {
    a.x_router = x;
  } else {
    EnsureShape(&a.x_router, x.shape(), DType::kF32, x.device());
    ops::Cast(x, a.x_router);
  }
  EnsureShape(&logits_, {n, e}, DType::kF32);
  ops::Linear(a.x_router, gate_.value, logits_);
  if (bias_ == nullptr && no_bias_.numel() != e) {
    EnsureShape(&no_bias_, {e}, DType::kF32, logits_.device());
    no_bias_.SetZero();
  }
  Route(router_, logits_, bias_ != nullptr ? bias_->value : no_bias_, &a.routing);
  if (!recompute) ops::CountExpertLoads(router_, a.routing.expert, loads_);
  if (balance_ != nullptr && !recompute) balance_->Add(slot, a.routing.scores, a.routing.expert);
  a.batch = batch;
  a.grad_scale = grad_scale;
  // The balance term of each sequence enters the objective with weight 1 /
  // (global sequences) = grad_scale x its whole length. Under context
  // parallelism this rank holds seq of those tokens: the sequences'
  // statistics add up over the context group, whose ranks then all hold the
  // same loss, counted once in the loss group's sum.
  EnsureShape(&a.daux, {n, e}, DType::kF32);
  a.daux.SetZero();
  if (aux_loss_alpha_ > 0) {
    const int64_t whole_seq = seq * cp_.size();
    const float aux_scale = static_cast<float>(aux_loss_alpha_ * grad_scale * whole_seq);
    EnsureShape(&balance_stats_, {batch, 2 * e}, DType::kF64);
    ops::SequenceBalanceStats(router_, a.routing.scores, a.routing.expert, batch, seq, whole_seq,
                              balance_stats_);
    if (cp_.size() > 1) SumOverContext(balance_stats_);
    const double aux =
        aux_loss_alpha_ * ops::SequenceBalanceLoss(router_, a.routing.scores, balance_stats_, batch,
                                                   seq, whole_seq, aux_scale, a.daux);
    if (!recompute) aux_loss_sum_ += aux / cp_.size();
  }
  RunExperts(a, x, recompute);
  EnsureShape(&out_, x.shape());
  dispatcher_.Combine(a.plan, a.routing.weights, a.y_send, out_);
  if (shared_) ops::Add(shared_->Forward(slot, x), out_);
  return out_;
}

Tensor MoeMlpLayer::Backward(int slot, const Tensor& dy) {
  Activations& a = slots_.ForBackward(slot);
  const int64_t n = a.x.dim(0);
  EnsureShape(&dweights_, {n, router_.top_k}, DType::kF32);
  dispatcher_.CombineBackward(a.plan, a.routing.weights, a.y_send, dy, &dy_send_, dweights_);
  dispatcher_.ToExperts(a.plan, dy_send_, &dy_grouped_);
  GroupedSwigluBackward(Experts(), a.experts, experts_region_.ExitBackward(dy_grouped_),
                        &dx_grouped_, &dact_, &dgate_, &dup_, weight_gradients_);
  dispatcher_.FromExperts(a.plan, experts_region_.EnterBackward(dx_grouped_), &dx_send_);
  EnsureShape(&dx_, a.x.shape());
  dispatcher_.Unpermute(a.plan, dx_send_, dx_);
  // The router: through the combine weights and the balance loss, to the gate.
  EnsureShape(&dscores_, a.routing.scores.shape(), DType::kF32);
  dscores_.CopyFrom(a.daux);
  if (balance_ != nullptr)
    aux_loss_sum_ += balance_->AddScoreGradient(slot, a.batch, a.grad_scale, dscores_);
  ops::RouterWeightsBackward(router_, a.routing.scores, a.routing.expert, dweights_, dscores_);
  EnsureShape(&dlogits_, a.routing.scores.shape(), DType::kF32);
  ops::RouterScoresBackward(router_, a.routing.scores, dscores_, dlogits_);
  const Tensor kept_dlogits = weight_gradients_.Keep(dlogits_);
  if (dx_.dtype() == DType::kF32) {
    weight_gradients_.LinearBackward(kept_dlogits, a.x_router, gate_.value, dx_, gate_.grad,
                                     /*accumulate_dx=*/true);
  } else {
    // The fp32 router's input gradient, then the cast's backward: rounded
    // to the activations' dtype and added, as autograd does through the cast.
    EnsureShape(&dx_router_, a.x_router.shape(), DType::kF32, dx_.device());
    weight_gradients_.LinearBackward(kept_dlogits, a.x_router, gate_.value, dx_router_, gate_.grad);
    EnsureShape(&dx_router_narrow_, dx_.shape(), dx_.dtype(), dx_.device());
    ops::Cast(dx_router_, dx_router_narrow_);
    ops::Add(dx_router_narrow_, dx_);
  }
  if (shared_) ops::Add(shared_->Backward(slot, dy), dx_);
  return dx_;
}

void MoeMlpLayer::set_recompute_activation(bool recompute) {
  recompute_activation_ = recompute;
  if (shared_) shared_->set_recompute_activation(recompute);
}

void MoeMlpLayer::ReleaseOwnScratch() {
  experts_region_.Release();
  ReleaseTensors({&logits_, &send_, &y_grouped_, &out_, &dy_send_, &dy_grouped_, &dx_grouped_,
                  &dx_send_, &dx_, &dweights_, &dscores_, &dlogits_, &dx_router_,
                  &dx_router_narrow_, &dact_, &dgate_, &dup_, &balance_stats_, &gathered_stats_});
}

void MoeMlpLayer::ResetStats() {
  EnsureShape(&loads_, {router_.num_experts}, DType::kI32);
  loads_.SetZero();
  aux_loss_sum_ = 0;
  dropped_ = 0;
  dispatcher_.ResetCounters();
}

void MoeMlpLayer::SumOverContext(const Tensor& stats) {
  // Gathered and added in rank order (fp64: backends gather it, not all reduce it).
  EnsureShape(&gathered_stats_, {cp_.size(), stats.numel()}, DType::kF64, stats.device());
  cp_.AllGather(stats, gathered_stats_);
  const Tensor flat = stats.Reshape({stats.numel()});
  flat.CopyFrom(gathered_stats_.Slice(0, 1).Reshape({stats.numel()}));
  for (int r = 1; r < cp_.size(); ++r)
    ops::Add(gathered_stats_.Slice(r, r + 1).Reshape({stats.numel()}), flat);
}

void MoeMlpLayer::UpdateBias(const Tensor& loads, double speed) {
  if (bias_ != nullptr) ops::UpdateRouterBias(loads, speed, bias_->value);
}

}  // namespace tetra
