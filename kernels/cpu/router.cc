#include "kernels/cpu/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/logging.h"

namespace tetra::cpu {
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

void RouterScores(const RouterSpec& spec, const float* logits, int64_t n, float* scores) {
  const int e = spec.num_experts;
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits + t * e;
    float* s = scores + t * e;
    if (spec.softmax) {
      const float max = *std::max_element(z, z + e);
      float sum = 0;
      for (int i = 0; i < e; ++i) sum += s[i] = std::exp(z[i] - max);
      for (int i = 0; i < e; ++i) s[i] /= sum;
    } else {
      for (int i = 0; i < e; ++i) s[i] = 1.0f / (1.0f + std::exp(-z[i]));
    }
  }
}

void RouterTopK(const RouterSpec& spec, const float* scores, const float* bias, int64_t n,
                int32_t* expert, float* weights) {
  const int e = spec.num_experts, k = spec.top_k;
  TETRA_CHECK(spec.n_group >= 1 && e % spec.n_group == 0 && spec.topk_group <= spec.n_group &&
              k <= e)
      << "router of " << e << " experts in " << spec.n_group << " groups, top " << k
      << " of the best " << spec.topk_group << " groups";
  const int group_size = e / spec.n_group;
  std::vector<float> biased(e), group_score(spec.n_group);
  std::vector<int> order, groups;
  std::vector<bool> kept(spec.n_group);
  for (int64_t t = 0; t < n; ++t) {
    const float* s = scores + t * e;
    for (int i = 0; i < e; ++i) biased[i] = s[i] + bias[i];
    if (spec.n_group > 1) {
      // Keep only the topk_group groups with the best sums of their top-2 biased scores.
      for (int g = 0; g < spec.n_group; ++g) {
        TopK(&biased[g * group_size], group_size, std::min(2, group_size), &order);
        group_score[g] = 0;
        for (int i : order) group_score[g] += biased[g * group_size + i];
      }
      TopK(group_score.data(), spec.n_group, spec.topk_group, &groups);
      std::fill(kept.begin(), kept.end(), false);
      for (int g : groups) kept[g] = true;
      for (int i = 0; i < e; ++i) {
        if (!kept[i / group_size]) biased[i] = -std::numeric_limits<float>::infinity();
      }
    }
    TopK(biased.data(), e, k, &order);
    float* w = weights + t * k;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      expert[t * k + j] = order[j];
      sum += w[j] = s[order[j]];
    }
    const float scale =
        spec.routed_scaling_factor / (spec.norm_topk_prob ? sum + kNormEpsilon : 1.0f);
    for (int j = 0; j < k; ++j) w[j] *= scale;
  }
}

void RouterWeightsBackward(const RouterSpec& spec, const float* scores, const int32_t* expert,
                           const float* dweights, int64_t n, float* dscores) {
  const int e = spec.num_experts, k = spec.top_k;
  for (int64_t t = 0; t < n; ++t) {
    const float* s = scores + t * e;
    const float* dw = dweights + t * k;
    const int32_t* chosen = expert + t * k;
    float* ds = dscores + t * e;
    if (!spec.norm_topk_prob) {
      for (int j = 0; j < k; ++j) ds[chosen[j]] += spec.routed_scaling_factor * dw[j];
      continue;
    }
    // w_j = a s_j / D, D = sum_l s_l + eps: dL/ds_j = a (dw_j - sum_l dw_l s_l / D) / D.
    float d = kNormEpsilon, dot = 0;
    for (int j = 0; j < k; ++j) d += s[chosen[j]], dot += dw[j] * s[chosen[j]];
    for (int j = 0; j < k; ++j) ds[chosen[j]] += spec.routed_scaling_factor * (dw[j] - dot / d) / d;
  }
}

void RouterScoresBackward(const RouterSpec& spec, const float* scores, const float* dscores,
                          int64_t n, float* dlogits) {
  const int e = spec.num_experts;
  for (int64_t t = 0; t < n; ++t) {
    const float* s = scores + t * e;
    const float* ds = dscores + t * e;
    float* dz = dlogits + t * e;
    if (spec.softmax) {
      float dot = 0;
      for (int i = 0; i < e; ++i) dot += ds[i] * s[i];
      for (int i = 0; i < e; ++i) dz[i] = s[i] * (ds[i] - dot);
    } else {
      for (int i = 0; i < e; ++i) dz[i] = ds[i] * s[i] * (1.0f - s[i]);
    }
  }
}

void SequenceBalanceStats(const RouterSpec& spec, const float* scores, const int32_t* expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, double* stats) {
  const int e = spec.num_experts, k = spec.top_k;
  for (int64_t b = 0; b < batch; ++b) {
    double* f = stats + b * 2 * e;
    double* p = f + e;
    std::fill(f, f + 2 * e, 0.0);
    for (int64_t t = b * seq; t < (b + 1) * seq; ++t) {
      for (int j = 0; j < k; ++j) f[expert[t * k + j]] += double{1.0} * e / (k * whole_seq);
      const float* s = scores + t * e;
      const double sum = std::accumulate(s, s + e, 0.0);
      for (int i = 0; i < e; ++i) p[i] += s[i] / sum / whole_seq;
    }
  }
}

double SequenceBalanceLoss(const RouterSpec& spec, const float* scores, const double* stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           float* dscores) {
  const int e = spec.num_experts;
  double total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const double* f = stats + b * 2 * e;
    const double* p = f + e;
    for (int i = 0; i < e; ++i) total += f[i] * p[i];
    if (dscores == nullptr) continue;
    // d/ds'_{t,i} = g f_i / T; s' = s / S: ds_j = (ds'_j - sum_i ds'_i s'_i) / S.
    for (int64_t t = b * seq; t < (b + 1) * seq; ++t) {
      const float* s = scores + t * e;
      float* ds = dscores + t * e;
      const double sum = std::accumulate(s, s + e, 0.0);
      double dot = 0;
      for (int i = 0; i < e; ++i) dot += grad_scale * f[i] / whole_seq * s[i] / sum;
      for (int i = 0; i < e; ++i)
        ds[i] += static_cast<float>((grad_scale * f[i] / whole_seq - dot) / sum);
    }
  }
  return total;
}

void CountExpertLoads(const RouterSpec& spec, const int32_t* expert, int64_t n, int32_t* loads) {
  for (int64_t p = 0; p < n * spec.top_k; ++p) {
    TETRA_CHECK(expert[p] >= 0 && expert[p] < spec.num_experts)
        << "expert " << expert[p] << " of choice " << p << " outside [0, " << spec.num_experts
        << ")";
    ++loads[expert[p]];
  }
}

void UpdateRouterBias(const int32_t* loads, int num_experts, double speed, float* bias) {
  const double mean = std::accumulate(loads, loads + num_experts, 0.0) / num_experts;
  for (int i = 0; i < num_experts; ++i) {
    const double gap = mean - static_cast<double>(loads[i]);
    bias[i] += static_cast<float>(speed * ((gap > 0) - (gap < 0)));
  }
}

}  // namespace tetra::cpu
