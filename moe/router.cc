#include "moe/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/logging.h"

namespace tetra {
namespace {

// HF's DeepSeek-V3 adds this to the sum of the chosen scores before dividing.
constexpr float kNormEpsilon = 1e-20f;

// Indices of the `k` largest of values[0, n), best first, ties to the lower index.
void TopK(const float* values, int n, int k, std::vector<int>* order) {
  order->resize(n);
  std::iota(order->begin(), order->end(), 0);
  std::partial_sort(order->begin(), order->begin() + k, order->end(), [&](int a, int b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order->resize(k);
}

}  // namespace

RouterConfig RouterConfig::FromProto(const MoeConfig& moe) {
  RouterConfig c;
  c.num_experts = moe.n_routed_experts();
  c.top_k = moe.num_experts_per_tok();
  c.n_group = moe.n_group();
  c.topk_group = moe.topk_group();
  c.softmax = moe.scoring_func() == "softmax";
  c.norm_topk_prob = moe.norm_topk_prob();
  c.routed_scaling_factor = static_cast<float>(moe.routed_scaling_factor());
  return c;
}

void Route(const RouterConfig& c, const Tensor& logits, const Tensor& bias, Routing* routing) {
  const int e = c.num_experts, k = c.top_k;
  TETRA_CHECK(logits.rank() == 2 && logits.dim(1) == e && bias.numel() == e)
      << "router logits " << ShapeString(logits.shape()) << " and bias "
      << ShapeString(bias.shape()) << " for " << e << " experts";
  TETRA_CHECK(e % c.n_group == 0 && c.topk_group <= c.n_group && k <= e) << "bad router config";
  const int64_t n = logits.dim(0);
  EnsureShape(&routing->scores, {n, e});
  EnsureShape(&routing->weights, {n, k});
  routing->expert.resize(n * k);
  const int group_size = e / c.n_group;
  const float* b = bias.f32();
  std::vector<float> biased(e), group_score(c.n_group);
  std::vector<int> order, groups;
  std::vector<bool> kept(c.n_group);
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits.f32() + t * e;
    float* s = routing->scores.f32() + t * e;
    if (c.softmax) {
      const float max = *std::max_element(z, z + e);
      float sum = 0;
      for (int i = 0; i < e; ++i) sum += s[i] = std::exp(z[i] - max);
      for (int i = 0; i < e; ++i) s[i] /= sum;
    } else {
      for (int i = 0; i < e; ++i) s[i] = 1.0f / (1.0f + std::exp(-z[i]));
    }
    for (int i = 0; i < e; ++i) biased[i] = s[i] + b[i];
    if (c.n_group > 1) {
      // Keep only the topk_group groups with the best sums of their top-2 biased scores.
      for (int g = 0; g < c.n_group; ++g) {
        TopK(&biased[g * group_size], group_size, std::min(2, group_size), &order);
        group_score[g] = 0;
        for (int i : order) group_score[g] += biased[g * group_size + i];
      }
      TopK(group_score.data(), c.n_group, c.topk_group, &groups);
      std::fill(kept.begin(), kept.end(), false);
      for (int g : groups) kept[g] = true;
      for (int i = 0; i < e; ++i) {
        if (!kept[i / group_size]) biased[i] = -std::numeric_limits<float>::infinity();
      }
    }
    TopK(biased.data(), e, k, &order);
    float* w = routing->weights.f32() + t * k;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      routing->expert[t * k + j] = order[j];
      sum += w[j] = s[order[j]];
    }
    const float scale = c.routed_scaling_factor / (c.norm_topk_prob ? sum + kNormEpsilon : 1.0f);
    for (int j = 0; j < k; ++j) w[j] *= scale;
  }
}

void WeightsBackward(const RouterConfig& c, const Routing& routing, const Tensor& dweights,
                     const Tensor& dscores) {
  const int e = c.num_experts, k = c.top_k;
  for (int64_t t = 0; t < routing.tokens(); ++t) {
    const float* s = routing.scores.f32() + t * e;
    const float* dw = dweights.f32() + t * k;
    const int32_t* chosen = &routing.expert[t * k];
    float* ds = dscores.f32() + t * e;
    if (!c.norm_topk_prob) {
      for (int j = 0; j < k; ++j) ds[chosen[j]] += c.routed_scaling_factor * dw[j];
      continue;
    }
    // w_j = a s_j / D, D = sum_l s_l + eps: dL/ds_j = a (dw_j - sum_l dw_l s_l / D) / D.
    float d = kNormEpsilon, dot = 0;
    for (int j = 0; j < k; ++j) d += s[chosen[j]], dot += dw[j] * s[chosen[j]];
    for (int j = 0; j < k; ++j) {
      ds[chosen[j]] += c.routed_scaling_factor * (dw[j] - dot / d) / d;
    }
  }
}

void ScoresBackward(const RouterConfig& c, const Routing& routing, const Tensor& dscores,
                    const Tensor& dlogits) {
  const int e = c.num_experts;
  for (int64_t t = 0; t < routing.tokens(); ++t) {
    const float* s = routing.scores.f32() + t * e;
    const float* ds = dscores.f32() + t * e;
    float* dz = dlogits.f32() + t * e;
    if (c.softmax) {
      float dot = 0;
      for (int i = 0; i < e; ++i) dot += ds[i] * s[i];
      for (int i = 0; i < e; ++i) dz[i] = s[i] * (ds[i] - dot);
    } else {
      for (int i = 0; i < e; ++i) dz[i] = ds[i] * s[i] * (1.0f - s[i]);
    }
  }
}

double SequenceBalanceLoss(const RouterConfig& c, const Routing& routing, int64_t batch,
                           int64_t seq, float grad_scale, const Tensor& dscores) {
  const int e = c.num_experts, k = c.top_k;
  TETRA_CHECK(routing.tokens() == batch * seq) << "balance loss over " << routing.tokens()
                                               << " tokens, not " << batch << " x " << seq;
  double total = 0;
  std::vector<double> f(e), p(e);
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(f.begin(), f.end(), 0.0);
    std::fill(p.begin(), p.end(), 0.0);
    for (int64_t t = b * seq; t < (b + 1) * seq; ++t) {
      for (int j = 0; j < k; ++j) f[routing.expert[t * k + j]] += double{1.0} * e / (k * seq);
      const float* s = routing.scores.f32() + t * e;
      const double sum = std::accumulate(s, s + e, 0.0);
      for (int i = 0; i < e; ++i) p[i] += s[i] / sum / seq;
    }
    for (int i = 0; i < e; ++i) total += f[i] * p[i];
    if (!dscores.defined()) continue;
    // d/ds'_{t,i} = g f_i / T; s' = s / S: ds_j = (ds'_j - sum_i ds'_i s'_i) / S.
    for (int64_t t = b * seq; t < (b + 1) * seq; ++t) {
      const float* s = routing.scores.f32() + t * e;
      float* ds = dscores.f32() + t * e;
      const double sum = std::accumulate(s, s + e, 0.0);
      double dot = 0;
      for (int i = 0; i < e; ++i) dot += grad_scale * f[i] / seq * s[i] / sum;
      for (int i = 0; i < e; ++i) {
        ds[i] += static_cast<float>((grad_scale * f[i] / seq - dot) / sum);
      }
    }
  }
  return total;
}

void CountLoads(const RouterConfig& c, const Routing& routing, std::vector<int64_t>* loads) {
  loads->resize(c.num_experts, 0);
  for (int32_t expert : routing.expert) ++(*loads)[expert];
}

void UpdateBias(const std::vector<int64_t>& loads, double speed, const Tensor& bias) {
  TETRA_CHECK(bias.numel() == static_cast<int64_t>(loads.size()));
  const double mean =
      std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(loads.size());
  float* b = bias.f32();
  for (size_t i = 0; i < loads.size(); ++i) {
    const double gap = mean - static_cast<double>(loads[i]);
    b[i] += static_cast<float>(speed * ((gap > 0) - (gap < 0)));
  }
}

double LoadImbalance(const std::vector<int64_t>& loads) {
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  if (total == 0) return 1.0;
  return *std::max_element(loads.begin(), loads.end()) / (total / loads.size());
}

}  // namespace tetra
