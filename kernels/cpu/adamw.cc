#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/logging.h"
#include "kernels/cpu/partition.h"
#include "kernels/cpu/vec_math.h"

namespace tetra::cpu {

void AdamWUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWHyper& h) {
  TETRA_CHECK(h.step >= 1) << "AdamW step " << h.step << " (steps count from 1)";
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  // The scalars torch passes to its fp32 tensor ops, each rounded once.
  const float decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float lerp_weight = static_cast<float>(1.0 - h.beta1);
  const bool small_weight = std::fabs(lerp_weight) < 0.5f;
  const float beta2 = static_cast<float>(h.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const float neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(h.eps);
  // Chunks small enough for a stack buffer of sqrt(v) that stays in L1: the
  // moment loop and the parameter loop vectorise, SqrtInPlace takes the roots.
  constexpr int64_t kChunk = 512;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    float* p = param + begin;
    const float* g = grad + begin;
    float* mc = m + begin;
    float* vc = v + begin;
    float root_v[kChunk];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      // torch's lerp: the formula that is exact at its end of the weight range.
      mc[i] = small_weight ? mc[i] + lerp_weight * (g[i] - mc[i])
                           : g[i] - (g[i] - mc[i]) * (1.0f - lerp_weight);
      vc[i] = vc[i] * beta2 + one_minus_beta2 * g[i] * g[i];
      root_v[i] = vc[i];
    }
    SqrtInPlace(root_v, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const float denom = root_v[i] / bias_correction2_sqrt + eps;
      p[i] = p[i] * decay + neg_step_size * mc[i] / denom;
    }
  }
}

}  // namespace tetra::cpu
