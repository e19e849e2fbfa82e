// Rotary position embeddings on the device, in place on (B, T, H, D) in the
// rotate-half convention: pairs (i, i + D/2) rotate by the angle of
// (position, i); the backward rotates the gradient back (the transpose of a
// rotation is the opposite rotation).
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (row, head, pair): rows = B * T, position = row % T.
template <typename T>
__global__ void RopeKernel(T* x, int64_t rows, int64_t seq, int64_t heads, int64_t half,
                           const float* cos_table, const float* sin_table, float sin_sign) {
  const int64_t n = rows * heads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t row_head = idx / half;
    const int64_t pos = (row_head / heads) % seq;
    T* x1 = x + row_head * 2 * half;
    const float a = ToFloat(x1[i]), b = ToFloat(x1[i + half]);
    const float c = cos_table[pos * half + i], s = sin_sign * sin_table[pos * half + i];
    x1[i] = FromFloat<T>(a * c - b * s);
    x1[i + half] = FromFloat<T>(b * c + a * s);
  }
}

}  // namespace

void Rope(const Tensor& x, const RopeTable& table, bool backward) {
  ExpectDevice(x, "Rope", "x");
  ExpectDevice(table.cos, "Rope", "the cos table");
  ExpectDevice(table.sin, "Rope", "the sin table");
  TETRA_CHECK(x.rank() == 4 && x.dim(3) == 2 * table.half_dim && x.dim(1) <= table.seq)
      << "Rope: x " << ShapeString(x.shape()) << " vs table (" << table.seq << ", "
      << table.half_dim << ")";
  const int64_t rows = x.dim(0) * x.dim(1), n = rows * x.dim(2) * table.half_dim;
  if (n == 0) return;
  DispatchFloat(x.dtype(), "Rope", [&](auto tag) {
    using T = decltype(tag);
    RopeKernel<T><<<GridFor(n, kThreads), kThreads, 0, CurrentStream()>>>(
        x.data<T>(), rows, x.dim(1), x.dim(2), table.half_dim, table.cos.f32(), table.sin.f32(),
        backward ? -1.0f : 1.0f);
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
