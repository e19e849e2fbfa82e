// Elementwise and reduction ops on the device: sum of squares (for the global
// gradient norm), scale, add and dtype casts.
#include "kernels/cuda/reduce.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_arena.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 512;  // blocks of the first pass, fixed for determinism

// partial[block] = sum over the block's grid-stride elements of f(x), fp64.
template <typename T, bool kSquare>
__global__ void PartialSumKernel(const T* x, int64_t n, double* partial) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = ToFloat(x[i]);
    sum += kSquare ? v * v : v;
  }
  sum = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void FinalSumKernel(const double* partial, int n, double* total) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
  sum = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) *total = sum;
}

template <typename T, bool kSquare>
double Reduce(const T* x, int64_t n) {
  if (n == 0) return 0.0;
  // Its own buffer, not Scratch: callers reduce values they keep in Scratch.
  static double* partial = [] {
    void* p = nullptr;
    TETRA_CUDA_CHECK(cudaMalloc(&p, (kPartials + 1) * sizeof(double)));
    return static_cast<double*>(p);
  }();
  PartialSumKernel<T, kSquare><<<kPartials, kThreads, 0, CurrentStream()>>>(x, n, partial);
  FinalSumKernel<<<1, kThreads, 0, CurrentStream()>>>(partial, kPartials, partial + kPartials);
  TETRA_CUDA_CHECK_LAUNCH();
  double total = 0.0;
  CopyBytes(&total, partial + kPartials, sizeof(double));
  return total;
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * factor);
  }
}

template <typename T>
__global__ void AddKernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + ToFloat(x[i]));
  }
}

__global__ void AddF64Kernel(const double* x, double* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += x[i];
  }
}

template <typename S, typename D>
__global__ void CastKernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = FromFloat<D>(ToFloat(src[i]));
  }
}

}  // namespace

double SumToHost(const float* values, int64_t n) { return Reduce<float, false>(values, n); }

double SumOfSquares(const Tensor& x) {
  ExpectDevice(x, "SumOfSquares", "x");
  double result = 0.0;
  DispatchFloat(x.dtype(), "SumOfSquares", [&](auto tag) {
    using T = decltype(tag);
    result = Reduce<T, true>(x.data<T>(), x.numel());
  });
  return result;
}

void Scale(const Tensor& x, float factor) {
  ExpectDevice(x, "Scale", "x");
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloat(x.dtype(), "Scale", [&](auto tag) {
    using T = decltype(tag);
    ScaleKernel<T><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(x.data<T>(), n,
                                                                             factor);
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

void Add(const Tensor& x, const Tensor& y) {
  ExpectDevice(x, "Add", "x");
  ExpectDevice(y, "Add", "y");
  const int64_t n = x.numel();
  TETRA_CHECK(y.numel() == n && y.dtype() == x.dtype()) << "Add: x and y differ";
  if (n == 0) return;
  if (x.dtype() == DType::kF64) {
    AddF64Kernel<<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(x.data<double>(), y.data<double>(), n);
    TETRA_CUDA_CHECK_LAUNCH();
    return;
  }
  DispatchFloat(x.dtype(), "Add", [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(x.data<T>(),
                                                                           y.data<T>(), n);
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

void Cast(const Tensor& src, const Tensor& dst) {
  ExpectDevice(src, "Cast", "src");
  ExpectDevice(dst, "Cast", "dst");
  const int64_t n = src.numel();
  TETRA_CHECK(dst.numel() == n) << "Cast: " << n << " elements into " << dst.numel();
  if (n == 0) return;
  DispatchFloat(src.dtype(), "Cast", [&](auto src_tag) {
    DispatchFloat(dst.dtype(), "Cast", [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      CastKernel<S, D><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(
          src.data<S>(), dst.data<D>(), n);
    });
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
