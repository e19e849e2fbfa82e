// RMSNorm on the device with fp32 statistics whatever the activations hold:
// y = w * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps), one block per row,
// optionally fused with the residual add before it (the sum stored, then
// normalised as stored) and with the residual gradient's add after the
// backward, so neither needs a pass of its own.
// The weight gradient sums over rows in two deterministic passes (row groups
// into fp32 partials, then the partials in group order), with no atomics.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnThreads = 256;
constexpr int64_t kMaxRowGroups = 128;

// With delta (and sum) non-null the row normalised is sum = x + delta, stored
// first as an Add would store it; each thread reads back only its own stores.
template <typename T>
__global__ void RmsNormKernel(const T* x, const T* delta, const T* w, int64_t dim, float eps,
                              T* sum, T* y, float* rstd) {
  __shared__ float shared[32];
  const int64_t offset = blockIdx.x * dim;
  const T* in = delta != nullptr ? sum + offset : x + offset;
  T* yr = y + offset;
  float sum_sq = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float v = ToFloat(x[offset + j]);
    if (delta != nullptr) {
      const T stored = FromFloat<T>(v + ToFloat(delta[offset + j]));
      sum[offset + j] = stored;
      v = ToFloat(stored);
    }
    sum_sq += v * v;
  }
  sum_sq = BlockSum(sum_sq, shared);
  const float s = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = s;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    yr[j] = FromFloat<T>(ToFloat(w[j]) * (ToFloat(in[j]) * s));
  }
}

// partial (groups, dim): group g sums dy * (x * rstd) over its rows.
template <typename T>
__global__ void RmsNormWeightPartialKernel(const T* dy, const T* x, const float* rstd, int64_t rows,
                                           int64_t dim, int64_t rows_per_group, float* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= dim) return;
  const int64_t begin = blockIdx.y * rows_per_group;
  const int64_t end = min(rows, begin + rows_per_group);
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    sum += ToFloat(dy[r * dim + j]) * (ToFloat(x[r * dim + j]) * rstd[r]);
  }
  partial[blockIdx.y * dim + j] = sum;
}

__global__ void SumPartialsKernel(const float* partial, int64_t groups, int64_t dim, float* dw) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= dim) return;
  float sum = 0.0f;
  for (int64_t g = 0; g < groups; ++g) sum += partial[g * dim + j];
  dw[j] += sum;
}

// With g = w * dy: dx = s * g - s^3 / dim * (g . x) * x, plus dx_add (when
// non-null) after rounding to T as a stored gradient would be. dx may alias
// dy and dx_add: each thread reads its elements before the block-wide sum
// and writes them after it.
template <typename T>
__global__ void RmsNormInputGradKernel(const T* dy, const T* x, const T* w, const float* rstd,
                                       int64_t dim, const T* dx_add, T* dx) {
  __shared__ float shared[32];
  const int64_t offset = blockIdx.x * dim;
  const float s = rstd[blockIdx.x];
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    dot += ToFloat(w[j]) * ToFloat(dy[offset + j]) * ToFloat(x[offset + j]);
  }
  dot = BlockSum(dot, shared);
  const float c = s * s * s * dot / static_cast<float>(dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float g = ToFloat(w[j]) * ToFloat(dy[offset + j]);
    const T grad = FromFloat<T>(s * g - c * ToFloat(x[offset + j]));
    dx[offset + j] =
        dx_add != nullptr ? FromFloat<T>(ToFloat(dx_add[offset + j]) + ToFloat(grad)) : grad;
  }
}

}  // namespace

namespace {

// RmsNorm, or with delta defined AddRmsNorm.
void LaunchRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps,
                   const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  const char* op = delta.defined() ? "AddRmsNorm" : "RmsNorm";
  for (const Tensor* t : {&x, &w, &y, &rstd}) ExpectDevice(*t, op, "an operand");
  const int64_t dim = x.dim(-1), rows = x.numel() / dim;
  if (delta.defined()) {
    ExpectDevice(delta, op, "delta");
    ExpectDevice(sum, op, "sum");
  }
  if (rows == 0) return;
  DispatchFloat(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(RmsNormKernel<T>, rows, kRowThreads, 0, CurrentStream(), x.data<T>(),
                 delta.defined() ? delta.data<T>() : nullptr, w.data<T>(), dim, eps,
                 delta.defined() ? sum.data<T>() : nullptr, y.data<T>(), rstd.f32());
  });
}

}  // namespace

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  LaunchRmsNorm(x, Tensor(), w, eps, Tensor(), y, rstd);
}

void AddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& sum,
                const Tensor& y, const Tensor& rstd) {
  LaunchRmsNorm(x, delta, w, eps, sum, y, rstd);
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& dx_add) {
  // dx or dw may be undefined: the halves of a split backward, each launched
  // as in the whole one.
  for (const Tensor* t : {&dy, &x, &w, &rstd}) ExpectDevice(*t, "RmsNormBackward", "an operand");
  for (const Tensor* t : {&dx, &dw, &dx_add}) {
    if (t->defined()) ExpectDevice(*t, "RmsNormBackward", "an output or dx_add");
  }
  const int64_t dim = x.dim(-1), rows = x.numel() / dim;
  if (rows == 0) return;
  const int64_t groups = std::min(kMaxRowGroups, CeilDiv(rows, 32));
  const int64_t rows_per_group = CeilDiv(rows, groups);
  const dim3 partial_grid(CeilDiv(dim, kColumnThreads), groups);
  DispatchFloat(x.dtype(), "RmsNormBackward", [&](auto tag) {
    using T = decltype(tag);
    if (dw.defined()) {
      float* partial = static_cast<float*>(Scratch(groups * dim * sizeof(float)));
      LaunchKernel(RmsNormWeightPartialKernel<T>, partial_grid, kColumnThreads, 0, CurrentStream(),
                   dy.data<T>(), x.data<T>(), rstd.f32(), rows, dim, rows_per_group, partial);
      LaunchKernel(SumPartialsKernel, CeilDiv(dim, kColumnThreads), kColumnThreads, 0,
                   CurrentStream(), partial, groups, dim, dw.f32());
    }
    if (dx.defined()) {
      LaunchKernel(RmsNormInputGradKernel<T>, rows, kRowThreads, 0, CurrentStream(), dy.data<T>(),
                   x.data<T>(), w.data<T>(), rstd.f32(), dim,
                   dx_add.defined() ? dx_add.data<T>() : nullptr, dx.data<T>());
    }
  });
}

}  // namespace tetra::cuda
