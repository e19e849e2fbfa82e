// SwiGLU on the device: out = silu(gate) * up and its gradient, elementwise,
// in fp32 with the CPU reference's formulas (kernels/cpu/swiglu.cc), with
// 16-byte loads and stores where the operands allow (vector_access.cuh).
#include <algorithm>
#include <initializer_list>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride, 16-byte vectors where every operand shares gate's alignment.
template <typename T>
__global__ void SwigluKernel(const T* gate, const T* up, VectorSplit split, T* out) {
  ForEachPart<T>(split, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                 int64_t{gridDim.x} * blockDim.x, [&](int64_t i, auto width) {
                   constexpr int kW = decltype(width)::value;
                   float g[kW], u[kW], o[kW];
                   LoadFloats(gate + i, g);
                   LoadFloats(up + i, u);
#pragma unroll
                   for (int k = 0; k < kW; ++k) o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
                   StoreFloats(out + i, o);
                 });
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* dout, const T* gate, const T* up, VectorSplit split,
                                     T* dgate, T* dup) {
  ForEachPart<T>(split, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                 int64_t{gridDim.x} * blockDim.x, [&](int64_t i, auto width) {
                   constexpr int kW = decltype(width)::value;
                   float d[kW], g[kW], u[kW], dg[kW], du[kW];
                   LoadFloats(dout + i, d);
                   LoadFloats(gate + i, g);
                   LoadFloats(up + i, u);
#pragma unroll
                   for (int k = 0; k < kW; ++k) {
                     const float denom = 1.0f + expf(-g[k]);
                     const float sigmoid = 1.0f / denom;
                     dg[k] = d[k] * u[k] * (sigmoid * (1.0f + g[k] * (1.0f - sigmoid)));
                     du[k] = d[k] * (g[k] / denom);
                   }
                   // Both outputs are written after every input is read: dgate may alias dout.
                   StoreFloats(dgate + i, dg);
                   StoreFloats(dup + i, du);
                 });
}

// The split of n elements at `first`, vectorised when every operand agrees
// with it modulo 16 bytes.
template <typename T>
VectorSplit SplitAll(const T* first, int64_t n, std::initializer_list<const void*> others) {
  bool same = true;
  for (const void* p : others) same = same && SameAlignment(first, p);
  return SplitForVectors(first, n, same);
}

// Blocks for one grid-stride pass over a split: its head is all of n or
// shorter than a vector, its tail shorter than a vector (under one block).
unsigned GridForSplit(const VectorSplit& s) {
  return GridFor(std::max(s.head, s.vectors), kThreads);
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
    const VectorSplit split = SplitAll(gate.data<T>(), n, {up.raw(), out.raw()});
    SwigluKernel<T><<<GridForSplit(split), kThreads, 0, CurrentStream()>>>(
        gate.data<T>(), up.data<T>(), split, out.data<T>());
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
    const VectorSplit split =
        SplitAll(gate.data<T>(), n, {dout.raw(), up.raw(), dgate.raw(), dup.raw()});
    SwigluBackwardKernel<T><<<GridForSplit(split), kThreads, 0, CurrentStream()>>>(
        dout.data<T>(), gate.data<T>(), up.data<T>(), split, dgate.data<T>(), dup.data<T>());
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
