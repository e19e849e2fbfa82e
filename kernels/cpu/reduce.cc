#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/partition.h"

namespace tetra::cpu {

double SumOfSquares(const float* x, int64_t n) {
  // Fixed blocks, not per-thread shares, so the summation order is the same
  // for every thread count.
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = b * kBlock; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[b] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

double WeightedSumOfSquares(const std::vector<const float*>& xs, const std::vector<int64_t>& sizes,
                            const std::vector<double>& weights) {
  double total = 0;
  for (size_t k = 0; k < xs.size(); ++k) total += weights[k] * SumOfSquares(xs[k], sizes[k]);
  return total;
}

void Scale(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Add(const float* x, const float* y, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

void Add(const double* x, const double* y, double* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

}  // namespace tetra::cpu
