// The DeepSeek-V3 router's arithmetic, on N tokens and E routed experts
// (kernels/op_types.h's RouterSpec), fp32 except the chosen experts' ids:
//
//   scores s = sigmoid(logits) or softmax(logits)        (N, E)
//   choice   = top-k of s + bias over the topk_group best of n_group groups
//              (a group's score: the sum of its two best biased scores)
//   weights  = s of the chosen experts, divided by their sum when
//              norm_topk_prob, times routed_scaling_factor   (N, k)
//
// The bias only steers the choice; weights and gradients use the unbiased
// scores, so the bias gets no gradient. Ties go to the lower expert index.
#ifndef TETRA_KERNELS_CPU_ROUTER_H_
#define TETRA_KERNELS_CPU_ROUTER_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// scores (n, E) from logits (n, E).
void RouterScores(const RouterSpec& spec, const float* logits, int64_t n, float* scores);
// expert (n, k), best biased score first, and weights (n, k) from scores (n,
// E) and bias (E).
void RouterTopK(const RouterSpec& spec, const float* scores, const float* bias, int64_t n,
                int32_t* expert, float* weights);
// dscores (n, E) += the gradient through the combine weights, given dweights (n, k).
void RouterWeightsBackward(const RouterSpec& spec, const float* scores, const int32_t* expert,
                           const float* dweights, int64_t n, float* dscores);
// dlogits (n, E) = the Jacobian of sigmoid or softmax applied to dscores (n, E), written.
void RouterScoresBackward(const RouterSpec& spec, const float* scores, const float* dscores,
                          int64_t n, float* dlogits);
// The sequence-wise balance loss (DeepSeek-V3 report eqs. 17-20) in two
// steps, so that under context parallelism the statistics of each sequence
// can be summed over the ranks holding its chunks in between. Here are seq
// tokens of each of the batch sequences of whole_seq tokens (rows b seq + t).
// stats (batch, 2E): per sequence f_i = E / (k whole_seq) x (its tokens here
// choosing i), added once per choice, then P_i = the sum over its tokens here,
// in order, of s_i / sum_j s_j / whole_seq.
void SequenceBalanceStats(const RouterSpec& spec, const float* scores, const int32_t* expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, double* stats);
// Returns the sum over the sequences, then the experts, of f_i P_i from stats
// (summed over the ranks). When dscores is not null, adds grad_scale x the
// gradient of that sum with respect to these tokens' scores (f held constant,
// as it counts discrete choices).
double SequenceBalanceLoss(const RouterSpec& spec, const float* scores, const double* stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           float* dscores);
// loads (E) += how many of the n x k choices went to each expert.
void CountExpertLoads(const RouterSpec& spec, const int32_t* expert, int64_t n, int32_t* loads);
// The aux-loss-free update: bias_i += speed * sign(mean load - load_i).
void UpdateRouterBias(const int32_t* loads, int num_experts, double speed, float* bias);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ROUTER_H_
