// Linear layers' biases on the device (kernels/cpu/bias.h): added to every
// row, and their gradient summed over the rows in fp32, a thread per column
// walking the rows in order (the CPU reference's order: the same bits), the
// threads of a warp on neighbouring columns so each row's read is coalesced.
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/expect_device.h"
#include "kernels/cuda/launch.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void AddBiasKernel(const T* bias, int64_t n, int64_t width, T* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + ToFloat(bias[i % width]));
  }
}

template <typename T>
__global__ void BiasGradientKernel(const T* dy, int64_t rows, int64_t width, float* dbias) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= width) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += ToFloat(dy[r * width + c]);
  dbias[c] += sum;
}

}  // namespace

void AddBias(const Tensor& bias, const Tensor& y) {
  ExpectDevice(bias, "AddBias", "bias");
  ExpectDevice(y, "AddBias", "y");
  const int64_t n = y.numel();
  if (n == 0) return;
  DispatchFloat(y.dtype(), "AddBias", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(AddBiasKernel<T>, GridFor(n, kThreads), kThreads, 0, CurrentStream(),
                 bias.data<T>(), n, y.dim(-1), y.data<T>());
  });
}

void BiasGradient(const Tensor& dy, const Tensor& dbias) {
  ExpectDevice(dy, "BiasGradient", "dy");
  ExpectDevice(dbias, "BiasGradient", "dbias");
  const int64_t width = dbias.numel();
  if (width == 0) return;
  DispatchFloat(dy.dtype(), "BiasGradient", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(BiasGradientKernel<T>, GridFor(width, kThreads), kThreads, 0, CurrentStream(),
                 dy.data<T>(), dy.numel() / width, width, dbias.f32());
  });
}

}  // namespace tetra::cuda
