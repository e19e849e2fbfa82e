// Device helpers shared by the CUDA kernels: fp32 <-> storage-type loads and
// stores (every kernel computes in fp32 whatever the tensors hold), warp and
// block reductions, checked indices, and the launch-shape arithmetic.
#ifndef TETRA_KERNELS_CUDA_DEVICE_MATH_CUH_
#define TETRA_KERNELS_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>

#include "core/tensor.h"
#include "kernels/cuda/expect_device.h"
#include "kernels/cuda/launch.cuh"

namespace tetra::cuda {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// index[i], trapping when outside [0, bound): indices made by another kernel
// (the router's experts, the dispatch order's rows), so a bad one is a bug.
__device__ __forceinline__ int64_t CheckedIndex(const int32_t* index, int64_t i, int64_t bound,
                                                const char* what) {
  const int64_t value = index[i];
  if (value < 0 || value >= bound) {
    printf("tetra: %s %lld at %lld outside [0, %lld)\n", what, static_cast<long long>(value),
           static_cast<long long>(i), static_cast<long long>(bound));
    __trap();
  }
  return value;
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `shared` holds 32 floats; the block must reach
// the call together.
__device__ __forceinline__ float BlockSum(float x, float* shared) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = WarpSum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < blockDim.x / 32 ? shared[lane] : 0.0f;
  return WarpSum(x);
}

__device__ __forceinline__ float BlockMax(float x, float* shared) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = WarpMax(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < blockDim.x / 32 ? shared[lane] : -INFINITY;
  return WarpMax(x);
}

// BlockSum in fp64, in a fixed order (deterministic); `shared` holds 32
// doubles.
__device__ __forceinline__ double BlockSumDouble(double x, double* shared) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < blockDim.x / 32 ? shared[lane] : 0.0;
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid for a grid-stride loop over n elements: enough blocks to fill the
// device several times over, never more than CUDA's x limit.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = CeilDiv(n, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// Calls f(T{}) with T = float or __nv_bfloat16 for `dtype`; other dtypes
// are a bug (checked, naming `op`).
template <typename F>
void DispatchFloat(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      return;
    case DType::kBF16:
      f(__nv_bfloat16{});
      return;
    default:
      TETRA_CHECK(false) << op << ": no CUDA kernel for " << DTypeName(dtype);
  }
}

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_DEVICE_MATH_CUH_
