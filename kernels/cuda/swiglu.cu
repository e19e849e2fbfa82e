// SwiGLU on the device: out = silu(gate) * up and its gradient, elementwise,
// in fp32 with the CPU reference's formulas (kernels/cpu/swiglu.cc).
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void SwigluKernel(const T* gate, const T* up, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = ToFloat(gate[i]);
    out[i] = FromFloat<T>(g / (1.0f + expf(-g)) * ToFloat(up[i]));
  }
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* dout, const T* gate, const T* up, int64_t n,
                                     T* dgate, T* dup) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = ToFloat(gate[i]), u = ToFloat(up[i]), d = ToFloat(dout[i]);
    const float denom = 1.0f + expf(-g);
    const float sigmoid = 1.0f / denom;
    // Both outputs are written after every input is read: dgate may alias dout.
    const float dg = d * u * (sigmoid * (1.0f + g * (1.0f - sigmoid)));
    const float du = d * (g / denom);
    dgate[i] = FromFloat<T>(dg);
    dup[i] = FromFloat<T>(du);
  }
}

}  // namespace

void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  for (const Tensor* t : {&gate, &up, &out}) ExpectDevice(*t, "Swiglu", "an operand");
  TETRA_CHECK(up.numel() == gate.numel() && out.numel() == gate.numel() &&
              up.dtype() == gate.dtype() && out.dtype() == gate.dtype())
      << "Swiglu: gate, up and out differ in size or dtype";
  const int64_t n = gate.numel();
  if (n == 0) return;
  DispatchFloat(gate.dtype(), "Swiglu", [&](auto tag) {
    using T = decltype(tag);
    SwigluKernel<T><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(
        gate.data<T>(), up.data<T>(), n, out.data<T>());
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                    const Tensor& dgate, const Tensor& dup) {
  for (const Tensor* t : {&dout, &gate, &up, &dgate, &dup}) {
    ExpectDevice(*t, "SwigluBackward", "an operand");
    TETRA_CHECK(t->dtype() == gate.dtype()) << "SwigluBackward: operands differ in dtype";
  }
  const int64_t n = gate.numel();
  TETRA_CHECK(dout.numel() == n && up.numel() == n && dgate.numel() == n && dup.numel() == n)
      << "SwigluBackward: sizes differ";
  if (n == 0) return;
  DispatchFloat(gate.dtype(), "SwigluBackward", [&](auto tag) {
    using T = decltype(tag);
    SwigluBackwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(
        dout.data<T>(), gate.data<T>(), up.data<T>(), n, dgate.data<T>(), dup.data<T>());
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
