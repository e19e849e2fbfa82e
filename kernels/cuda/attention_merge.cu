// ops::AttentionMerge on the device: ring attention's merge of two attentions
// of the same queries over disjoint keys by their log-sum-exps, with the
// arithmetic of the CPU reference (kernels/cpu/attention.cc): one warp per
// (batch, token, head) row, its lanes over the row's Dv values.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block

// out (rows, vdim) fp32 and lse (B, H, T) fp32 merged with part_out (rows,
// vdim) and part_lse (B, H, T); rows = B T H in out's order.
template <typename T>
__global__ void MergeKernel(int64_t rows, int64_t seq, int64_t heads, int64_t vdim,
                            const T* part_out, const float* part_lse, float* out, float* lse) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; r < rows;
       r += int64_t{gridDim.x} * kWarps) {
    const int64_t h = r % heads, t = r / heads % seq, b = r / heads / seq;
    const int64_t at = (b * heads + h) * seq + t;
    const float a = lse[at], p = part_lse[at];
    const float m = fmaxf(a, p);
    if (m == -INFINITY) continue;  // neither side has keys (warp-uniform)
    // log(e^a + e^p) = m + log1p(e^-|a - p|): no overflow, exact where one
    // side dominates.
    const float merged = m + log1pf(expf(fminf(a, p) - m));
    const float wa = expf(a - merged), wp = expf(p - merged);
    float* o = out + r * vdim;
    const T* po = part_out + r * vdim;
    for (int64_t c = lane; c < vdim; c += 32) {
      // A side without keys adds nothing, even where its out holds no number.
      o[c] = (a == -INFINITY ? 0.0f : wa * o[c]) + (p == -INFINITY ? 0.0f : wp * ToFloat(po[c]));
    }
    __syncwarp();  // every lane has read lse[at] before lane 0 overwrites it
    if (lane == 0) lse[at] = merged;
  }
}

}  // namespace

void AttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                    const Tensor& lse) {
  ExpectDevice(part_out, "AttentionMerge", "part_out");
  ExpectDevice(part_lse, "AttentionMerge", "part_lse");
  ExpectDevice(out, "AttentionMerge", "out");
  ExpectDevice(lse, "AttentionMerge", "lse");
  const int64_t seq = out.dim(1), heads = out.dim(2), vdim = out.dim(3);
  const int64_t rows = out.dim(0) * seq * heads;
  if (rows == 0) return;
  DispatchFloat(part_out.dtype(), "AttentionMerge", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(MergeKernel<T>, GridFor(rows, kWarps), kWarps * 32, 0, CurrentStream(), rows, seq,
                 heads, vdim, part_out.data<T>(), part_lse.f32(), out.f32(), lse.f32());
  });
}

}  // namespace tetra::cuda
