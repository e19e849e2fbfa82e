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

// The steps of one row; every kernel below is made of these, so the fused
// and the piecewise cross-entropy compute the same numbers.

float RowMax(const float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j < n; ++j) max = x[j] > max ? x[j] : max;  // std::max: not vectorised
  return max;
}

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

double RowLoss(float max, float target_logit, double sum) {
  return (static_cast<double>(max) - target_logit) + std::log(sum);
}

float GradientScale(float grad_scale, double sum) { return static_cast<float>(grad_scale / sum); }

// A target below 0 marks a row left out (kIgnoredTarget); one at or past
// vocab_size is a bug. Returns whether the row counts.
bool CheckTarget(int32_t target, int64_t row, int64_t vocab_size) {
  TETRA_CHECK(target < vocab_size)
      << "target " << target << " of row " << row << " outside [0, " << vocab_size << ")";
  return target >= 0;
}

}  // namespace

double CrossEntropyForwardBackward(const float* logits, const int32_t* targets, int64_t rows,
                                   int64_t width, int64_t vocab_size, float grad_scale,
                                   float* dlogits, float* row_losses) {
  TETRA_CHECK(vocab_size > 0 && vocab_size <= width)
      << "vocab " << vocab_size << " of width " << width;
  std::vector<double> losses(rows);
#pragma omp parallel for schedule(static) if (rows * width >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t target = targets[r];
    float* d = dlogits != nullptr ? dlogits + r * width : nullptr;
    if (!CheckTarget(target, r, vocab_size)) {
      if (d != nullptr) std::fill(d, d + width, 0.0f);
      losses[r] = 0;
      if (row_losses != nullptr) row_losses[r] = 0;
      continue;
    }
    const float* x = logits + r * width;
    const float max = RowMax(x, vocab_size);
    const float target_logit = x[target];  // read before an in-place gradient overwrites it
    // exp(x - max) goes to dlogits first, then is scaled into the softmax.
    const double sum = SumExp(x, vocab_size, max, d);
    if (d != nullptr) {
      const float scale = GradientScale(grad_scale, sum);
#pragma omp simd
      for (int64_t j = 0; j < vocab_size; ++j) d[j] *= scale;
      d[target] -= grad_scale;
      std::fill(d + vocab_size, d + width, 0.0f);
    }
    losses[r] = RowLoss(max, target_logit, sum);
    if (row_losses != nullptr) row_losses[r] = static_cast<float>(losses[r]);
  }
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += losses[r];
  return total;
}

void CrossEntropyRowStats(const float* logits, const int32_t* targets, int64_t rows, int64_t width,
                          int64_t vocab_begin, int64_t vocab_size, float* row_max,
                          float* target_logit) {
  TETRA_CHECK(width > 0) << "width " << width;
  const int64_t real = RealColumns(width, vocab_begin, vocab_size);
#pragma omp parallel for schedule(static) if (rows * width >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    CheckTarget(targets[r], r, vocab_size);
    const float* x = logits + r * width;
    row_max[r] = RowMax(x, real);
    const int64_t local = targets[r] - vocab_begin;
    target_logit[r] = local >= 0 && local < real ? x[local] : 0.0f;
  }
}

void CrossEntropySumExp(const float* logits, const float* row_max, int64_t rows, int64_t width,
                        int64_t vocab_begin, int64_t vocab_size, double* sum_exp) {
  const int64_t real = RealColumns(width, vocab_begin, vocab_size);
#pragma omp parallel for schedule(static) if (rows * width >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r)
    sum_exp[r] = SumExp(logits + r * width, real, row_max[r], nullptr);
}

double CrossEntropyLoss(const int32_t* targets, const float* row_max, const float* target_logit,
                        const double* sum_exp, int64_t rows) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] >= 0) total += RowLoss(row_max[r], target_logit[r], sum_exp[r]);
  }
  return total;
}

void CrossEntropyGradient(const float* logits, const int32_t* targets, const float* row_max,
                          const double* sum_exp, int64_t rows, int64_t width, int64_t vocab_begin,
                          int64_t vocab_size, float grad_scale, float* dlogits) {
  const int64_t real = RealColumns(width, vocab_begin, vocab_size);
#pragma omp parallel for schedule(static) if (rows * width >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * width;
    float* d = dlogits + r * width;
    const bool ignored = targets[r] < 0;
    const float max = row_max[r], scale = ignored ? 0.0f : GradientScale(grad_scale, sum_exp[r]);
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) d[j] = VecExp(x[j] - max) * scale;
    std::fill(d + real, d + width, 0.0f);
    const int64_t local = targets[r] - vocab_begin;
    if (!ignored && local >= 0 && local < real) d[local] -= grad_scale;
  }
}

}  // namespace tetra::cpu
