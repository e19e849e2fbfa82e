// Rotary position embeddings on the device, in place on (B, T, H, D) in the
// rotate-half convention: pairs (i, i + D/2) rotate by the angle of
// (position, i); the backward rotates the gradient back (the transpose of a
// rotation is the opposite rotation). Each thread rotates a 16-byte vector
// of each half where the head dim and the pointers allow, one pair otherwise.
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (row, head, W pairs): rows = B * T, position = row % T; W
// is 1 or a whole vector of x (16-byte loads of x's two halves, and of the
// fp32 table in 16-byte pieces).
template <int W, typename T>
__global__ void RopeKernel(T* x, int64_t rows, int64_t seq, int64_t heads, int64_t half,
                           const float* cos_table, const float* sin_table, float sin_sign) {
  const int64_t groups = half / W, n = rows * heads * groups;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % groups * W;
    const int64_t row_head = idx / groups;
    const int64_t pos = (row_head / heads) % seq;
    T* x1 = x + row_head * 2 * half + i;
    float a[W], b[W], c[W], s[W], y1[W], y2[W];
    LoadFloats(x1, a);
    LoadFloats(x1 + half, b);
    LoadFloats(cos_table + pos * half + i, c);
    LoadFloats(sin_table + pos * half + i, s);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float sk = sin_sign * s[k];
      y1[k] = a[k] * c[k] - b[k] * sk;
      y2[k] = b[k] * c[k] + a[k] * sk;
    }
    StoreFloats(x1, y1);
    StoreFloats(x1 + half, y2);
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
    constexpr int kW = kVectorWidth<T>;
    // Vectors when every head's halves and table row split into aligned
    // vectors: half a multiple of W (so of 4 fp32 table entries) and the
    // three bases aligned; otherwise one pair per thread.
    const bool vectorize = table.half_dim % kW == 0 && Aligned(x.raw()) &&
                           Aligned(table.cos.raw()) && Aligned(table.sin.raw());
    auto launch = [&](auto kernel, int width) {
      kernel<<<GridFor(n / width, kThreads), kThreads, 0, CurrentStream()>>>(
          x.data<T>(), rows, x.dim(1), x.dim(2), table.half_dim, table.cos.f32(),
          table.sin.f32(), backward ? -1.0f : 1.0f);
    };
    if (vectorize) {
      launch(RopeKernel<kW, T>, kW);
    } else {
      launch(RopeKernel<1, T>, 1);
    }
  });
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
