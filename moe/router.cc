#include "moe/router.h"

#include <algorithm>
#include <numeric>

#include "kernels/ops.h"

namespace tetra {

RouterSpec RouterSpecFromConfig(const MoeConfig& moe) {
  return {.num_experts = moe.n_routed_experts(),
          .top_k = moe.num_experts_per_tok(),
          .n_group = moe.n_group(),
          .topk_group = moe.topk_group(),
          .softmax = moe.scoring_func() == "softmax",
          .norm_topk_prob = moe.norm_topk_prob(),
          .routed_scaling_factor = static_cast<float>(moe.routed_scaling_factor())};
}

void Route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Routing* routing) {
  const int64_t n = logits.dim(0);
  const DeviceType device = logits.device();
  // The router runs in fp32 in every precision.
  EnsureShape(&routing->scores, {n, spec.num_experts}, DType::kF32, device);
  EnsureShape(&routing->expert, {n, spec.top_k}, DType::kI32, device);
  EnsureShape(&routing->weights, {n, spec.top_k}, DType::kF32, device);
  ops::RouterScores(spec, logits, routing->scores);
  ops::RouterTopK(spec, routing->scores, bias, routing->expert, routing->weights);
}

double LoadImbalance(const std::vector<int64_t>& loads) {
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  if (total == 0) return 1.0;
  return *std::max_element(loads.begin(), loads.end()) / (total / loads.size());
}

}  // namespace tetra
