#include "kernels/cpu/rope.h"

#include <cstring>
#include <vector>

#include "absl/base/attributes.h"
#include "core/logging.h"
#include "kernels/cpu/partition.h"

namespace tetra::cpu {
namespace {

// The table for `seq` positions rotating `rotary_dim` dims.
void CheckTable(int64_t seq, int64_t rotary_dim, const RopeTable& table) {
  TETRA_CHECK(rotary_dim == 2 * table.half_dim)
      << "rotary dims " << rotary_dim << " vs table half_dim " << table.half_dim;
  TETRA_CHECK(seq <= table.seq) << "seq " << seq << " > table seq " << table.seq;
  TETRA_CHECK(table.cos.device() == DeviceType::kCPU && table.sin.device() == DeviceType::kCPU)
      << "RoPE table is not on the host";
}

// Rotates `heads` head vectors of one token from `in` into `out` by +angle
// (sin_sign 1) or -angle (sin_sign -1); out may be in. Every op rotates
// through this one compiled function (never inlined, so never contracted or
// vectorised differently per caller): the fused split computes Rope's bits.
ABSL_ATTRIBUTE_NOINLINE void RotateHeads(const float* in, float* out, int64_t heads, int64_t half,
                                         const float* cos, const float* sin, float sin_sign) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* x1 = in + h * 2 * half;
    const float* x2 = x1 + half;
    float* y1 = out + h * 2 * half;
    float* y2 = y1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i];
      const float b = x2[i];
      const float s = sin_sign * sin[i];
      y1[i] = a * cos[i] - b * s;
      y2[i] = b * cos[i] + a * s;
    }
  }
}

void Rotate(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            const RopeTable& table, float sin_sign) {
  CheckTable(seq, head_dim, table);
  const int64_t half = table.half_dim;
  const int64_t rows = batch * seq;
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= kMinParallelWork)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const int64_t pos = bt % seq;
    float* row = x + bt * heads * head_dim;
    RotateHeads(row, row, heads, half, table.cos.f32() + pos * half, table.sin.f32() + pos * half,
                sin_sign);
  }
}

// Where each token's q, k and v head vectors lie: in the packed rows (one
// stride, three offsets) or in q, k, v (three bases and strides).
template <typename T>
struct QkvPieces {
  T* base[3];
  int64_t stride[3];
  T* Row(int piece, int64_t bt) const { return base[piece] + bt * stride[piece]; }
};

// Moves every token's pieces from `from` to `to`, rotating q's and k's heads
// by sin_sign and copying v's.
void MovePieces(const QkvPieces<const float>& from, const QkvPieces<float>& to, int64_t batch,
                int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                const RopeTable& table, float sin_sign) {
  CheckTable(seq, head_dim, table);
  const int64_t half = table.half_dim;
  const int64_t rows = batch * seq;
  const int64_t heads[2] = {q_heads, kv_heads};
#pragma omp parallel for schedule(static) if (rows * (q_heads + 2 * kv_heads) * head_dim >= \
                                              kMinParallelWork)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const int64_t pos = bt % seq;
    for (int piece = 0; piece < 2; ++piece) {
      RotateHeads(from.Row(piece, bt), to.Row(piece, bt), heads[piece], half,
                  table.cos.f32() + pos * half, table.sin.f32() + pos * half, sin_sign);
    }
    std::memcpy(to.Row(2, bt), from.Row(2, bt), kv_heads * head_dim * sizeof(float));
  }
}

// The pieces of packed rows [q | k | v], (q_heads + 2 kv_heads) x head_dim wide.
template <typename T>
QkvPieces<T> Packed(T* qkv, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t q_width = q_heads * head_dim, kv_width = kv_heads * head_dim;
  const int64_t width = q_width + 2 * kv_width;
  return {{qkv, qkv + q_width, qkv + q_width + kv_width}, {width, width, width}};
}

template <typename T>
QkvPieces<T> Separate(T* q, T* k, T* v, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  return {{q, k, v}, {q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim}};
}

// Each head's last 2 half_dim dims rotated (sin_sign as RotateHeads), the
// interleaved pairs moved to rotate-half places before a forward rotation and
// back after a backward one.
void RotateTails(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table, bool interleaved, float sin_sign) {
  TETRA_CHECK(head_dim >= 2 * table.half_dim)
      << "head_dim " << head_dim << " has fewer than the table's " << 2 * table.half_dim
      << " rotary dims";
  CheckTable(seq, 2 * table.half_dim, table);
  const int64_t half = table.half_dim, rows = batch * seq;
#pragma omp parallel for schedule(static) if (rows * heads * 2 * half >= kMinParallelWork)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const int64_t pos = bt % seq;
    const float* cos = table.cos.f32() + pos * half;
    const float* sin = table.sin.f32() + pos * half;
    std::vector<float> pairs(2 * half);  // the rotate-half layout of interleaved pairs
    for (int64_t h = 0; h < heads; ++h) {
      float* tail = x + (bt * heads + h) * head_dim + head_dim - 2 * half;
      if (!interleaved) {
        RotateHeads(tail, tail, 1, half, cos, sin, sin_sign);
      } else if (sin_sign > 0) {
        for (int64_t i = 0; i < half; ++i) {
          pairs[i] = tail[2 * i];
          pairs[half + i] = tail[2 * i + 1];
        }
        RotateHeads(pairs.data(), tail, 1, half, cos, sin, sin_sign);
      } else {
        RotateHeads(tail, pairs.data(), 1, half, cos, sin, sin_sign);
        for (int64_t i = 0; i < half; ++i) {
          tail[2 * i] = pairs[i];
          tail[2 * i + 1] = pairs[half + i];
        }
      }
    }
  }
}

}  // namespace

void DecoupledRopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                          const RopeTable& table, bool interleaved) {
  RotateTails(x, batch, seq, heads, head_dim, table, interleaved, 1.0f);
}

void DecoupledRopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                           const RopeTable& table, bool interleaved) {
  RotateTails(dx, batch, seq, heads, head_dim, table, interleaved, -1.0f);
}

void RopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table) {
  Rotate(x, batch, seq, heads, head_dim, table, 1.0f);
}

void RopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const RopeTable& table) {
  Rotate(dx, batch, seq, heads, head_dim, table, -1.0f);
}

void SplitQkvRope(const float* qkv, int64_t batch, int64_t seq, int64_t q_heads, int64_t kv_heads,
                  int64_t head_dim, const RopeTable& table, float* q, float* k, float* v) {
  MovePieces(Packed(qkv, q_heads, kv_heads, head_dim),
             Separate(q, k, v, q_heads, kv_heads, head_dim), batch, seq, q_heads, kv_heads,
             head_dim, table, 1.0f);
}

void MergeQkvRopeBackward(const float* dq, const float* dk, const float* dv, int64_t batch,
                          int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                          const RopeTable& table, float* dqkv) {
  MovePieces(Separate(dq, dk, dv, q_heads, kv_heads, head_dim),
             Packed(dqkv, q_heads, kv_heads, head_dim), batch, seq, q_heads, kv_heads, head_dim,
             table, -1.0f);
}

}  // namespace tetra::cpu
