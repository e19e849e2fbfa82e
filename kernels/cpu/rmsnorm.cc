#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/partition.h"

namespace tetra::cpu {
namespace {

// The value a bf16 tensor stores for v (round to nearest even, as Cast).
float RoundToBf16(float v) { return Bf16ToFloat(FloatToBf16(v)); }

// One row: yr = w * (xr * rstd), returns rstd.
float NormalizeRow(const float* xr, const float* w, int64_t dim, float eps, float* yr) {
  double sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t j = 0; j < dim; ++j) sum_sq += static_cast<double>(xr[j]) * xr[j];
  const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) yr[j] = w[j] * (xr[j] * s);
  return s;
}

}  // namespace

void RmsNormForward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                    float* rstd) {
#pragma omp parallel for schedule(static) if (rows * dim >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) rstd[r] = NormalizeRow(x + r * dim, w, dim, eps, y + r * dim);
}

void AddRmsNormForward(const float* x, const float* delta, const float* w, int64_t rows,
                       int64_t dim, float eps, bool round_bf16, float* sum, float* y, float* rstd) {
#pragma omp parallel for schedule(static) if (rows * dim >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dr = delta + r * dim;
    float* sr = sum + r * dim;
    if (round_bf16) {
      for (int64_t j = 0; j < dim; ++j) sr[j] = RoundToBf16(xr[j] + dr[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) sr[j] = xr[j] + dr[j];
    }
    rstd[r] = NormalizeRow(sr, w, dim, eps, y + r * dim);  // the row is still in cache
  }
}

void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                     int64_t rows, int64_t dim, float* dx, float* dw, const float* dx_add,
                     bool round_bf16) {
  if (dw != nullptr) {
    // dw[j] += sum_r dy[r, j] * x[r, j] * rstd[r], first, so that dx may overwrite dy.
#pragma omp parallel if (rows * dim >= kMinParallelWork)
    {
      // Not a structured binding: clang 14 cannot use one inside the omp simd below.
      const std::pair<int64_t, int64_t> slice = ThreadSlice(dim);
      const int64_t begin = slice.first, end = slice.second;
      std::vector<double> sum(end - begin, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const float* dyr = dy + r * dim + begin;
        const float* xr = x + r * dim + begin;
        const float s = rstd[r];
#pragma omp simd
        for (int64_t j = 0; j < end - begin; ++j) {
          sum[j] += static_cast<double>(dyr[j]) * (xr[j] * s);  // x * s as in the forward
        }
      }
      for (int64_t j = 0; j < end - begin; ++j) dw[begin + j] += static_cast<float>(sum[j]);
    }
  }
  if (dx == nullptr) return;
    // With g = w * dy: dx = s * g - s^3 / dim * (g . x) * x.
#pragma omp parallel for schedule(static) if (rows * dim >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * dim;
    const float* xr = x + r * dim;
    float* dxr = dx + r * dim;
    const double s = rstd[r];
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(w[j] * dyr[j]) * xr[j];
    const float c = static_cast<float>(s * s * s * dot / dim);
    const float sf = static_cast<float>(s);
    auto grad = [&](int64_t j) { return sf * (w[j] * dyr[j]) - c * xr[j]; };
    if (dx_add == nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) dxr[j] = grad(j);
    } else if (round_bf16) {
      const float* ar = dx_add + r * dim;
      for (int64_t j = 0; j < dim; ++j) dxr[j] = ar[j] + RoundToBf16(grad(j));
    } else {
      const float* ar = dx_add + r * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) dxr[j] = ar[j] + grad(j);
    }
  }
}

}  // namespace tetra::cpu
