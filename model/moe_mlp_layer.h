// The DeepSeek-V3 mixture-of-experts MLP of a decoder block:
//   y = shared_experts(x) + sum over the k chosen experts e of w_e expert_e(x)
// with the router, dispatcher and grouped experts of moe/. Parameters carry
// DeepSeek-V3's names under `prefix` ("model.layers.3.mlp"): gate.weight
// (E, C), gate.e_score_correction_bias (E, a buffer the bias update moves;
// sigmoid routers only), experts.{e}.{gate,up,down}_proj.weight for the
// experts this rank holds (its expert-parallel slice; Mixtral's w1, w3, w2
// under "block_sparse_moe", model_dims.h's MoeNamesOf),
// shared_experts.{gate,up,down}_proj.weight.
// Under tensor parallelism (without sequence parallelism) every TP rank
// routes the same tokens with a replicated router, and each expert is split
// like the dense MLP (gate/up column-parallel, down row-parallel): the
// experts' partial outputs, and input gradients, are summed over tp.
//
// The objective gets, per sequence, aux_loss_alpha x the sequence-wise
// balance loss, weighted like the cross-entropy sum (grad_scale x seq: one
// over the global batch's sequences). The layer counts, until ResetStats,
// the expert loads, that balance term and the dropped pairs, which the
// trainer sums over ranks for the bias update and the metrics.
#ifndef TETRA_MODEL_MOE_MLP_LAYER_H_
#define TETRA_MODEL_MOE_MLP_LAYER_H_

#include <memory>
#include <string>
#include <vector>

#include "model/activation_slots.h"
#include "model/mlp_layer.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "model/sublayer.h"
#include "moe/dispatcher.h"
#include "moe/grouped_experts.h"
#include "moe/router.h"
#include "moe/router_balance.h"
#include "parallel/tensor_parallel.h"
#include "proto/config.pb.h"

namespace tetra {

class MoeMlpLayer : public Sublayer {
 public:
  // `balance`: the model's transformers-style balance loss over all MoE
  // layers (model.moe.router_aux_loss_coef), or null.
  MoeMlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
              const LayerParallelism& parallelism = SingleRankParallelism(),
              RouterBalance* balance = nullptr);
  // x (N, C), N = batch x seq token rows -> y (N, C). grad_scale weights the
  // balance loss in the gradient as it weights the cross-entropy sum.
  // Collective over the expert-parallel group. A recompute (activation
  // recompute's second forward of the same tokens) adds nothing to the stats.
  Tensor Forward(int slot, const Tensor& x, int64_t batch, int64_t seq, float grad_scale,
                 bool recompute = false);
  Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) override {
    return Forward(slot, x, pass.batch, pass.seq, pass.grad_scale, pass.recompute);
  }
  // dy (N, C) of the forward of `slot` -> dx (N, C), written; accumulates
  // the weight gradients. Collective over the expert-parallel group.
  Tensor Backward(int slot, const Tensor& dy) override;
  // Selective recompute: the experts' SwiGLU activations (routed and shared)
  // are computed again in the backward instead of kept.
  void set_recompute_activation(bool recompute) override;

  // Since the last ResetStats: tokens that chose each expert (E, int32, on
  // the layer's device), the sum over sequences of aux_loss_alpha x their
  // balance loss, pairs dropped.
  const Tensor& loads() const { return loads_; }
  double aux_loss_sum() const { return aux_loss_sum_; }
  int64_t dropped() const { return dropped_; }
  void ResetStats();
  // bias_i += speed x sign(mean load - load_i), `loads` (E) int32 over the
  // global batch, on the layer's device.
  void UpdateBias(const Tensor& loads, double speed);
  TokenDispatcher& dispatcher() { return dispatcher_; }

 private:
  struct Activations {
    Tensor x;         // (N, C) the caller's input
    Tensor x_router;  // (N, C) fp32: x as the router reads it (x itself in fp32)
    Routing routing;
    DispatchPlan plan;
    Tensor grouped;  // (R, C) rows for this rank's experts
    GroupedActivations experts;
    Tensor y_send;      // (M, C) expert outputs, in send order
    Tensor daux;        // (N, E) the balance loss's score gradient
    int64_t batch = 0;  // sequences, and the cross-entropy's weight, for RouterBalance
    float grad_scale = 0;
  };

  RouterSpec router_;
  double aux_loss_alpha_;
  Parameter& gate_;
  Parameter* bias_;  // the correction bias (HasCorrectionBias), else null
  RouterBalance* balance_;
  Tensor no_bias_;  // (E) zeros, the routing's bias without one
  WeightGradients& weight_gradients_;
  // x's routed rows to the experts and back: a.plan, a.grouped, a.experts
  // and a.y_send (the experts' output rows in send order).
  void RunExperts(Activations& a, const Tensor& x, bool recompute);
  // Views of this rank's experts' parameters, in expert order (made after
  // ParameterStore::Pack has moved them).
  const std::vector<ExpertWeights>& Experts();
  // stats = the sum over the context group of every rank's stats.
  void SumOverContext(const Tensor& stats);
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override;

  struct ExpertParameters {
    Parameter *gate, *up, *down;
  };
  std::vector<ExpertParameters> expert_parameters_;
  std::vector<ExpertWeights> experts_;
  std::unique_ptr<MlpLayer> shared_;  // absent when n_shared_experts is 0
  TokenDispatcher dispatcher_;
  TensorParallelRegion experts_region_;  // the experts' sums over tp
  Communicator& cp_;  // the context group: sequences' balance statistics add up over it
  ActivationSlots<Activations> slots_;
  Tensor loads_;
  bool recompute_activation_ = false;
  double aux_loss_sum_ = 0;
  int64_t dropped_ = 0;
  // Scratch.
  Tensor logits_, send_, y_grouped_, out_;
  Tensor balance_stats_;   // (batch, 2E) fp64: the balance loss's per-sequence f and P
  Tensor gathered_stats_;  // (cp, batch x 2E) fp64: every context rank's
  Tensor dy_send_, dy_grouped_, dx_grouped_, dx_send_, dx_, dweights_, dscores_, dlogits_;
  Tensor dx_router_, dx_router_narrow_;  // (N, C) the router's input gradient, fp32 and narrowed
  Tensor dact_, dgate_, dup_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_MOE_MLP_LAYER_H_
