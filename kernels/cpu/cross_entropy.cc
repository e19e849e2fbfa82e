#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/logging.h"
#include "kernels/cpu/partition.h"
#include "kernels/cpu/vec_math.h"

namespace tetra::cpu {
namespace {

// sum_j exp(x[j] - max) over x (n), in double; each exp is also stored to
// out (n) when out is not null (out may be x). Chunked so that the exps are
// summed from L1, by a second loop: GCC does not vectorise the exp and the
// double sum as one loop.
double SumExp(const float* x, int64_t n, float max, float* out) {
  constexpr int64_t kChunk = 1024;
  float scratch[kChunk];
  double sum = 0;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    float* e = out != nullptr ? out + begin : scratch;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) e[j] = VecExp(x[begin + j] - max);
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < len; ++j) sum += e[j];
  }
  return sum;
}

}  // namespace

double CrossEntropyForwardBackward(const float* logits, const int32_t* targets, int64_t rows,
                                   int64_t vocab, float grad_scale, float* dlogits,
                                   float* row_losses) {
  TETRA_CHECK(vocab > 0) << "vocab " << vocab;
  std::vector<double> losses(rows);
#pragma omp parallel for schedule(static) if (rows * vocab >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t target = targets[r];
    TETRA_CHECK(target >= 0 && target < vocab)
        << "target " << target << " of row " << r << " outside [0, " << vocab << ")";
    const float* x = logits + r * vocab;
    float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < vocab; ++j) max = x[j] > max ? x[j] : max;  // std::max: not vectorised
    const float target_logit = x[target];  // read before an in-place gradient overwrites it
    // exp(x - max) goes to dlogits first, then is scaled into the softmax.
    float* d = dlogits != nullptr ? dlogits + r * vocab : nullptr;
    const double sum = SumExp(x, vocab, max, d);
    if (d != nullptr) {
      const float scale = static_cast<float>(grad_scale / sum);
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) d[j] *= scale;
      d[target] -= grad_scale;
    }
    losses[r] = (static_cast<double>(max) - target_logit) + std::log(sum);
    if (row_losses != nullptr) row_losses[r] = static_cast<float>(losses[r]);
  }
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += losses[r];
  return total;
}

}  // namespace tetra::cpu
