#include "kernels/cpu/rope.h"

#include <cmath>

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
  const int64_t half = table.half_dim;
  const int64_t rows = batch * seq;
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= kMinParallelWork)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const float* cos = table.cos.data() + (bt % seq) * half;
    const float* sin = table.sin.data() + (bt % seq) * half;
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

RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta) {
  TETRA_CHECK(seq >= 0 && head_dim > 0 && head_dim % 2 == 0)
      << "seq " << seq << " head_dim " << head_dim;
  RopeTable table;
  table.seq = seq;
  table.half_dim = head_dim / 2;
  table.cos.resize(seq * table.half_dim);
  table.sin.resize(seq * table.half_dim);
  std::vector<float> inv_freq(table.half_dim);
  for (int64_t i = 0; i < table.half_dim; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < table.half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      table.cos[p * table.half_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table.sin[p * table.half_dim + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

void RopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table) {
  Rotate(x, batch, seq, heads, head_dim, table, 1.0f);
}

void RopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const RopeTable& table) {
  Rotate(dx, batch, seq, heads, head_dim, table, -1.0f);
}

}  // namespace tetra::cpu
