// Rotary position embeddings on the device in the rotate-half convention:
// pairs (i, i + D/2) of each head vector rotate by the angle of (position,
// i); the backward rotates the gradient back (the transpose of a rotation is
// the opposite rotation). Rope works in place on (B, T, H, D); QkvRope splits
// the fused projection's packed rows [q | k | v] into q, k, v while rotating
// (and its backward merges the gradients back), so the split costs no pass of
// its own. Each thread moves a 16-byte vector of each half where the head
// dim and the pointers allow, one pair otherwise.
#include <initializer_list>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// Pairs [i, i + W) of one head vector from src to dst (dst may be src):
// rotated by +angle (sin_sign 1) or -angle (sin_sign -1) of the table row at
// cos/sin, or copied when !rotate.
template <int W, typename T>
__device__ __forceinline__ void MovePairs(const T* src, T* dst, int64_t half, int64_t i,
                                          const float* cos, const float* sin, float sin_sign,
                                          bool rotate) {
  float a[W], b[W], c[W], s[W], y1[W], y2[W];
  LoadFloats(src + i, a);
  LoadFloats(src + half + i, b);
  if (rotate) {
    LoadFloats(cos + i, c);
    LoadFloats(sin + i, s);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float sk = sin_sign * s[k];
      y1[k] = a[k] * c[k] - b[k] * sk;
      y2[k] = b[k] * c[k] + a[k] * sk;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) {
      y1[k] = a[k];
      y2[k] = b[k];
    }
  }
  StoreFloats(dst + i, y1);
  StoreFloats(dst + half + i, y2);
}

// One thread per (row, head, W pairs): rows = B * T, position = row % T; W
// is 1 or a whole vector of x (16-byte loads of x's two halves, and of the
// fp32 table in 16-byte pieces).
template <int W, typename T>
__global__ void RopeKernel(T* x, int64_t rows, int64_t seq, int64_t heads, int64_t half,
                           const float* cos_table, const float* sin_table, float sin_sign) {
  const int64_t groups = half / W, n = rows * heads * groups;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row_head = idx / groups;
    const int64_t pos = (row_head / heads) % seq;
    T* head = x + row_head * 2 * half;
    MovePairs<W>(head, head, half, idx % groups * W, cos_table + pos * half, sin_table + pos * half,
                 sin_sign, /*rotate=*/true);
  }
}

// One thread per (row, head of the packed row, W pairs): packed head h is
// q's head h (h < Hq), k's head h - Hq (h < Hq + Hkv) or v's head h - Hq -
// Hkv (copied). Forward: packed -> q, k, v; backward: dq, dk, dv -> packed.
template <int W, typename T>
__global__ void QkvRopeKernel(T* packed, T* q, T* k, T* v, int64_t rows, int64_t seq,
                              int64_t q_heads, int64_t kv_heads, int64_t half,
                              const float* cos_table, const float* sin_table, bool backward) {
  const int64_t heads = q_heads + 2 * kv_heads, groups = half / W, n = rows * heads * groups;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row_head = idx / groups;
    const int64_t row = row_head / heads, h = row_head % heads;
    const int64_t pos = row % seq;
    T* separate = h < q_heads ? q + (row * q_heads + h) * 2 * half
                  : h < q_heads + kv_heads
                      ? k + (row * kv_heads + h - q_heads) * 2 * half
                      : v + (row * kv_heads + h - q_heads - kv_heads) * 2 * half;
    T* in_packed = packed + row_head * 2 * half;
    MovePairs<W>(backward ? separate : in_packed, backward ? in_packed : separate, half,
                 idx % groups * W, cos_table + pos * half, sin_table + pos * half,
                 backward ? -1.0f : 1.0f, /*rotate=*/h < q_heads + kv_heads);
  }
}

// MLA's decoupled RoPE: one block per (row, head) at a time, one thread per
// pair of the head's last 2 half dims. Interleaved pairs change places in
// the rotation, so each thread reads its pair, the block waits, then writes.
template <typename T>
__global__ void DecoupledRopeKernel(T* x, int64_t row_heads, int64_t seq, int64_t heads,
                                    int64_t head_dim, int64_t half, const float* cos_table,
                                    const float* sin_table, bool interleaved, float sin_sign) {
  const int64_t i = threadIdx.x;
  // Interleaved: the forward reads pair (2i, 2i+1) and writes (i, i + half);
  // the backward the reverse.
  const bool read_side_by_side = interleaved && sin_sign > 0;
  const bool write_side_by_side = interleaved && sin_sign < 0;
  for (int64_t rh = blockIdx.x; rh < row_heads; rh += gridDim.x) {
    T* tail = x + rh * head_dim + head_dim - 2 * half;
    float a = 0, b = 0;
    if (i < half) {
      a = ToFloat(tail[read_side_by_side ? 2 * i : i]);
      b = ToFloat(tail[read_side_by_side ? 2 * i + 1 : i + half]);
    }
    __syncthreads();
    if (i < half) {
      const int64_t at = (rh / heads) % seq * half + i;
      const float c = cos_table[at], s = sin_sign * sin_table[at];
      tail[write_side_by_side ? 2 * i : i] = FromFloat<T>(a * c - b * s);
      tail[write_side_by_side ? 2 * i + 1 : i + half] = FromFloat<T>(b * c + a * s);
    }
    __syncthreads();  // this row's writes land before the block reads the next
  }
}

void ExpectTable(const RopeTable& table, const char* op) {
  ExpectDevice(table.cos, op, "the cos table");
  ExpectDevice(table.sin, op, "the sin table");
}

// Vectors when every head's halves and table row split into aligned vectors:
// half a multiple of W (so of 4 fp32 table entries) and every base aligned;
// otherwise one pair per thread.
template <typename T>
bool Vectorize(const RopeTable& table, std::initializer_list<const Tensor*> tensors) {
  bool aligned =
      table.half_dim % kVectorWidth<T> == 0 && Aligned(table.cos.raw()) && Aligned(table.sin.raw());
  for (const Tensor* t : tensors) aligned = aligned && Aligned(t->raw());
  return aligned;
}

// Every head of x (B, T, H, D) rotated in place; backward by the opposite angle.
void RotateHeads(const Tensor& x, const RopeTable& table, bool backward) {
  ExpectDevice(x, "Rope", "x");
  ExpectTable(table, "Rope");
  const int64_t rows = x.dim(0) * x.dim(1), n = rows * x.dim(2) * table.half_dim;
  if (n == 0) return;
  DispatchFloat(x.dtype(), "Rope", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kW = kVectorWidth<T>;
    auto launch = [&](auto kernel, int width) {
      LaunchKernel(kernel, GridFor(n / width, kThreads), kThreads, 0, CurrentStream(), x.data<T>(),
                   rows, x.dim(1), x.dim(2), table.half_dim, table.cos.f32(), table.sin.f32(),
                   backward ? -1.0f : 1.0f);
    };
    if (Vectorize<T>(table, {&x})) {
      launch(RopeKernel<kW, T>, kW);
    } else {
      launch(RopeKernel<1, T>, 1);
    }
  });
}

// qkv rows <-> q, k, v heads, q and k rotated (backward: rotated back, into qkv).
void QkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
             const Tensor& v, bool backward) {
  ExpectDevice(qkv, "QkvRope", "qkv");
  ExpectDevice(q, "QkvRope", "q");
  ExpectDevice(k, "QkvRope", "k");
  ExpectDevice(v, "QkvRope", "v");
  ExpectTable(table, "QkvRope");
  const int64_t rows = q.dim(0) * q.dim(1);
  const int64_t n = rows * (q.dim(2) + 2 * k.dim(2)) * table.half_dim;
  if (n == 0) return;
  DispatchFloat(q.dtype(), "QkvRope", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kW = kVectorWidth<T>;
    auto launch = [&](auto kernel, int width) {
      LaunchKernel(kernel, GridFor(n / width, kThreads), kThreads, 0, CurrentStream(),
                   qkv.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), rows, q.dim(1), q.dim(2),
                   k.dim(2), table.half_dim, table.cos.f32(), table.sin.f32(), backward);
    };
    if (Vectorize<T>(table, {&qkv, &q, &k, &v})) {
      launch(QkvRopeKernel<kW, T>, kW);
    } else {
      launch(QkvRopeKernel<1, T>, 1);
    }
  });
}

// Each head's last 2 half_dim dims rotated in place.
void RotateHeadTails(const Tensor& x, const RopeTable& table, bool interleaved, bool backward) {
  ExpectDevice(x, "DecoupledRope", "x");
  ExpectTable(table, "DecoupledRope");
  const int64_t row_heads = x.dim(0) * x.dim(1) * x.dim(2);
  if (row_heads == 0 || table.half_dim == 0) return;
  const int threads = static_cast<int>(CeilDiv(table.half_dim, 32) * 32);
  DispatchFloat(x.dtype(), "DecoupledRope", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(DecoupledRopeKernel<T>, GridFor(row_heads, 1), threads, 0, CurrentStream(),
                 x.data<T>(), row_heads, x.dim(1), x.dim(2), x.dim(3), table.half_dim,
                 table.cos.f32(), table.sin.f32(), interleaved, backward ? -1.0f : 1.0f);
  });
}

}  // namespace

void Rope(const Tensor& x, const RopeTable& table) { RotateHeads(x, table, /*backward=*/false); }

void RopeBackward(const Tensor& dx, const RopeTable& table) {
  RotateHeads(dx, table, /*backward=*/true);
}

void SplitQkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
                  const Tensor& v) {
  QkvRope(qkv, table, q, k, v, /*backward=*/false);
}

void MergeQkvRopeBackward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const RopeTable& table, const Tensor& dqkv) {
  QkvRope(dqkv, table, dq, dk, dv, /*backward=*/true);
}

void DecoupledRope(const Tensor& x, const RopeTable& table, bool interleaved) {
  RotateHeadTails(x, table, interleaved, /*backward=*/false);
}

void DecoupledRopeBackward(const Tensor& dx, const RopeTable& table, bool interleaved) {
  RotateHeadTails(dx, table, interleaved, /*backward=*/true);
}

}  // namespace tetra::cuda
