// SwiGLU on the device: out = silu(gate) * up and its gradient, elementwise,
// in fp32 with the CPU reference's formulas (kernels/cpu/swiglu.cc), with
// 16-byte loads and stores where the operands allow (vector_access.cuh); on
// separate gate and up tensors or packed as the halves of each row of the
// fused gate/up projection's output.
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

// One part of a split (ForEachPart: a scalar or kW elements of whole
// vectors) of each kernel below, flat or packed alike, so both compute the
// same bits.
template <int kW, typename T>
__device__ __forceinline__ void SwigluPart(const T* gate, const T* up, T* out) {
  float g[kW], u[kW], o[kW];
  LoadFloats(gate, g);
  LoadFloats(up, u);
#pragma unroll
  for (int k = 0; k < kW; ++k) o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
  StoreFloats(out, o);
}

template <int kW, typename T>
__device__ __forceinline__ void SwigluBackwardPart(const T* dout, const T* gate, const T* up,
                                                   T* dgate, T* dup) {
  float d[kW], g[kW], u[kW], dg[kW], du[kW];
  LoadFloats(dout, d);
  LoadFloats(gate, g);
  LoadFloats(up, u);
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const float denom = 1.0f + expf(-g[k]);
    const float sigmoid = 1.0f / denom;
    dg[k] = d[k] * u[k] * (sigmoid * (1.0f + g[k] * (1.0f - sigmoid)));
    du[k] = d[k] * (g[k] / denom);
  }
  // Both outputs are written after every input is read: dgate may alias dout or gate.
  StoreFloats(dgate, dg);
  StoreFloats(dup, du);
}

// Grid-stride, 16-byte vectors where every operand shares gate's alignment.
template <typename T>
__global__ void SwigluKernel(const T* gate, const T* up, VectorSplit split, T* out) {
  ForEachPart<T>(
      split, blockIdx.x * int64_t{blockDim.x} + threadIdx.x, int64_t{gridDim.x} * blockDim.x,
      [&](int64_t i, auto part) { SwigluPart<decltype(part)::value>(gate + i, up + i, out + i); });
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* dout, const T* gate, const T* up, VectorSplit split,
                                     T* dgate, T* dup) {
  ForEachPart<T>(split, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                 int64_t{gridDim.x} * blockDim.x, [&](int64_t i, auto part) {
                   SwigluBackwardPart<decltype(part)::value>(dout + i, gate + i, up + i, dgate + i,
                                                             dup + i);
                 });
}

// The packed kernels: a block per row of gate_up (rows, 2 x width) (grid-
// stride over rows), its threads over the row. Each row splits on its own:
// with a width that is not a multiple of a vector its gate, up and output
// halves fall at offsets that change from row to row, and a row takes
// vectors only when all of its operands agree modulo 16 bytes (else scalar).
template <typename T>
__global__ void SwigluPackedKernel(const T* gate_up, int64_t rows, int64_t width, T* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gate = gate_up + r * 2 * width;
    const T* up = gate + width;
    T* o = out + r * width;
    const VectorSplit split =
        SplitForVectors(gate, width, SameAlignment(gate, up) && SameAlignment(gate, o));
    ForEachPart<T>(split, threadIdx.x, blockDim.x, [&](int64_t i, auto part) {
      SwigluPart<decltype(part)::value>(gate + i, up + i, o + i);
    });
  }
}

template <typename T>
__global__ void SwigluPackedBackwardKernel(const T* dout, const T* gate_up, int64_t rows,
                                           int64_t width, T* dgate_up) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* d = dout + r * width;
    const T* gate = gate_up + r * 2 * width;
    const T* up = gate + width;
    T* dgate = dgate_up + r * 2 * width;
    T* dup = dgate + width;
    const VectorSplit split =
        SplitForVectors(gate, width,
                        SameAlignment(gate, up) && SameAlignment(gate, d) &&
                            SameAlignment(gate, dgate) && SameAlignment(gate, dup));
    ForEachPart<T>(split, threadIdx.x, blockDim.x, [&](int64_t i, auto part) {
      SwigluBackwardPart<decltype(part)::value>(d + i, gate + i, up + i, dgate + i, dup + i);
    });
  }
}

// Threads for one row of `width` elements of T: a warp per 32 vectors, up
// to kThreads, so short rows leave few threads idle.
template <typename T>
int ThreadsForRow(int64_t width) {
  const int64_t warps = CeilDiv(CeilDiv(width, kVectorWidth<T>), 32);
  return static_cast<int>(std::clamp<int64_t>(warps * 32, 32, kThreads));
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
  const int64_t n = gate.numel();
  if (n == 0) return;
  DispatchFloat(gate.dtype(), "Swiglu", [&](auto tag) {
    using T = decltype(tag);
    const VectorSplit split = SplitAll(gate.data<T>(), n, {up.raw(), out.raw()});
    LaunchKernel(SwigluKernel<T>, GridForSplit(split), kThreads, 0, CurrentStream(), gate.data<T>(),
                 up.data<T>(), split, out.data<T>());
  });
}

void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup) {
  for (const Tensor* t : {&dout, &gate, &up, &dgate, &dup}) {
    ExpectDevice(*t, "SwigluBackward", "an operand");
  }
  const int64_t n = gate.numel();
  if (n == 0) return;
  DispatchFloat(gate.dtype(), "SwigluBackward", [&](auto tag) {
    using T = decltype(tag);
    const VectorSplit split =
        SplitAll(gate.data<T>(), n, {dout.raw(), up.raw(), dgate.raw(), dup.raw()});
    LaunchKernel(SwigluBackwardKernel<T>, GridForSplit(split), kThreads, 0, CurrentStream(),
                 dout.data<T>(), gate.data<T>(), up.data<T>(), split, dgate.data<T>(),
                 dup.data<T>());
  });
}

// out (rows, width), gate_up (rows, 2 x width).
void SwigluPacked(const Tensor& gate_up, const Tensor& out) {
  for (const Tensor* t : {&gate_up, &out}) ExpectDevice(*t, "SwigluPacked", "an operand");
  if (out.numel() == 0) return;
  const int64_t width = out.dim(-1), rows = out.numel() / width;
  DispatchFloat(gate_up.dtype(), "SwigluPacked", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(SwigluPackedKernel<T>, GridFor(rows, 1), ThreadsForRow<T>(width), 0,
                 CurrentStream(), gate_up.data<T>(), rows, width, out.data<T>());
  });
}

void SwigluPackedBackward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  for (const Tensor* t : {&dout, &gate_up, &dgate_up}) {
    ExpectDevice(*t, "SwigluPackedBackward", "an operand");
  }
  if (dout.numel() == 0) return;
  const int64_t width = dout.dim(-1), rows = dout.numel() / width;
  DispatchFloat(gate_up.dtype(), "SwigluPackedBackward", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(SwigluPackedBackwardKernel<T>, GridFor(rows, 1), ThreadsForRow<T>(width), 0,
                 CurrentStream(), dout.data<T>(), gate_up.data<T>(), rows, width,
                 dgate_up.data<T>());
  });
}

}  // namespace tetra::cuda
