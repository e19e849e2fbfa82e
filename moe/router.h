// The DeepSeek-V3 router on plain tensors: which experts each token goes to
// and with what combine weight, its backward, the sequence-wise balance loss
// and the per-expert loads that the aux-loss-free bias update reads.
//
//   scores s = sigmoid(logits) or softmax(logits)        (N, E), fp32
//   choice   = top-k of s + bias over the topk_group best of n_group groups
//              (a group's score: the sum of its two best biased scores)
//   weights  = s of the chosen experts, divided by their sum when
//              norm_topk_prob, times routed_scaling_factor   (N, k)
//
// The bias only steers the choice; weights and gradients use the unbiased
// scores, so the bias gets no gradient. Ties go to the lower expert index.
#ifndef TETRA_MOE_ROUTER_H_
#define TETRA_MOE_ROUTER_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "proto/config.pb.h"

namespace tetra {

struct RouterConfig {
  int num_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  bool softmax = false;  // scoring_func "softmax"; else "sigmoid"
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;

  static RouterConfig FromProto(const MoeConfig& moe);
};

// One micro-batch's routing, kept for the backward.
struct Routing {
  Tensor scores;                // (N, E) unbiased scores s
  std::vector<int32_t> expert;  // (N, k) chosen experts, best biased score first
  Tensor weights;               // (N, k) combine weights
  int64_t tokens() const { return scores.dim(0); }
};

// logits (N, E), bias (E) -> *routing (buffers reused).
void Route(const RouterConfig& config, const Tensor& logits, const Tensor& bias, Routing* routing);

// Adds to dscores (N, E) the gradient through the combine weights, given
// dweights (N, k).
void WeightsBackward(const RouterConfig& config, const Routing& routing, const Tensor& dweights,
                     const Tensor& dscores);

// dscores (N, E) -> dlogits (N, E), written: the Jacobian of sigmoid or softmax.
void ScoresBackward(const RouterConfig& config, const Routing& routing, const Tensor& dscores,
                    const Tensor& dlogits);

// The sequence-wise balance loss (DeepSeek-V3 report eqs. 17-20) of the
// N = batch x seq tokens: returns sum over the batch's sequences of
// sum_i f_i P_i, with f_i = E / (k T) x (tokens of the sequence choosing i)
// and P_i = the sequence's mean of s_i / sum_j s_j. When dscores is defined,
// adds grad_scale x the gradient of that sum (f held constant, as it counts
// discrete choices).
double SequenceBalanceLoss(const RouterConfig& config, const Routing& routing, int64_t batch,
                           int64_t seq, float grad_scale, const Tensor& dscores);

// Adds to loads (E) how many tokens chose each expert.
void CountLoads(const RouterConfig& config, const Routing& routing, std::vector<int64_t>* loads);

// The aux-loss-free update: bias_i += speed * sign(mean load - load_i).
void UpdateBias(const std::vector<int64_t>& loads, double speed, const Tensor& bias);

// max / mean of loads (1 when every load is 0).
double LoadImbalance(const std::vector<int64_t>& loads);

}  // namespace tetra

#endif  // TETRA_MOE_ROUTER_H_
