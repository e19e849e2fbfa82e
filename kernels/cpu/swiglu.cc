#include "kernels/cpu/swiglu.h"

#include <algorithm>

#include "kernels/cpu/partition.h"
#include "kernels/cpu/vec_math.h"

namespace tetra::cpu {
namespace {

// rows x width elements: row r of the gate side (gate, up, dgate, dup)
// starts at r * gate_stride, of the out side (out, dout) at r * width. The
// separate ops are one row of n, the packed ones rows of stride 2 x width.
struct Rows {
  int64_t rows, width, gate_stride;
};

// Calls f(gate_offset, out_offset, count) for each run of `count` elements of
// one row in this thread's slice of the out side (contiguous), every thread
// of a team when the work is large enough.
template <typename F>
void ForEachRun(const Rows& l, F&& f) {
  const int64_t n = l.rows * l.width;
#pragma omp parallel if (n >= kMinParallelWork)
  {
    auto [begin, end] = ThreadSlice(n);
    while (begin < end) {
      const int64_t row = begin / l.width, column = begin % l.width;
      const int64_t count = std::min(l.width - column, end - begin);
      f(row * l.gate_stride + column, begin, count);
      begin += count;
    }
  }
}

void SwigluRows(const float* gate, const float* up, const Rows& l, float* out) {
  ForEachRun(l, [&](int64_t at, int64_t out_at, int64_t count) {
    const float* g = gate + at;
    const float* u = up + at;
    float* o = out + out_at;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) o[i] = g[i] / (1.0f + VecExp(-g[i])) * u[i];
  });
}

void SwigluRowsBackward(const float* dout, const float* gate, const float* up, const Rows& l,
                        float* dgate, float* dup) {
  ForEachRun(l, [&](int64_t at, int64_t out_at, int64_t count) {
    const float* d = dout + out_at;
    const float* g = gate + at;
    const float* u = up + at;
    float* dg = dgate + at;
    float* du = dup + at;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      const float gi = g[i], ui = u[i], di = d[i];
      const float denom = 1.0f + VecExp(-gi);
      const float sigmoid = 1.0f / denom;
      // silu'(g) = sigmoid * (1 + g * (1 - sigmoid)), as PyTorch's silu_backward.
      dg[i] = di * ui * (sigmoid * (1.0f + gi * (1.0f - sigmoid)));
      du[i] = di * (gi / denom);  // silu(g) rounded as in the forward
    }
  });
}

}  // namespace

void SwigluForward(const float* gate, const float* up, int64_t n, float* out) {
  SwigluRows(gate, up, {1, n, n}, out);
}

void SwigluBackward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                    float* dup) {
  SwigluRowsBackward(dout, gate, up, {1, n, n}, dgate, dup);
}

void SwigluPackedForward(const float* gate_up, int64_t rows, int64_t width, float* out) {
  SwigluRows(gate_up, gate_up + width, {rows, width, 2 * width}, out);
}

void SwigluPackedBackward(const float* dout, const float* gate_up, int64_t rows, int64_t width,
                          float* dgate_up) {
  SwigluRowsBackward(dout, gate_up, gate_up + width, {rows, width, 2 * width}, dgate_up,
                     dgate_up + width);
}

}  // namespace tetra::cpu
