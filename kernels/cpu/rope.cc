#include "kernels/cpu/rope.h"

#include "core/logging.h"
#include "kernels/cpu/partition.h"

namespace tetra::cpu {
namespace {

// Rotates every head pair by +angle (sin_sign 1) or -angle (sin_sign -1).
void Rotate(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            const RopeTable& table, float sin_sign) {
  TETRA_CHECK(head_dim == 2 * table.half_dim)
      << "head_dim " << head_dim << " vs table half_dim " << table.half_dim;
  TETRA_CHECK(seq <= table.seq) << "seq " << seq << " > table seq " << table.seq;
  TETRA_CHECK(table.cos.device() == DeviceType::kCPU && table.sin.device() == DeviceType::kCPU)
      << "RoPE table is not on the host";
  const int64_t half = table.half_dim;
  const int64_t rows = batch * seq;
  const float* cos_table = table.cos.f32();
  const float* sin_table = table.sin.f32();
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= kMinParallelWork)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const float* cos = cos_table + (bt % seq) * half;
    const float* sin = sin_table + (bt % seq) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* x1 = x + (bt * heads + h) * head_dim;
      float* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i];
        const float b = x2[i];
        const float s = sin_sign * sin[i];
        x1[i] = a * cos[i] - b * s;
        x2[i] = b * cos[i] + a * s;
      }
    }
  }
}

}  // namespace

void RopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table) {
  Rotate(x, batch, seq, heads, head_dim, table, 1.0f);
}

void RopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const RopeTable& table) {
  Rotate(dx, batch, seq, heads, head_dim, table, -1.0f);
}

}  // namespace tetra::cpu
