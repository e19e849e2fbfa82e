// RMSNorm as Hugging Face's LlamaRMSNorm computes it: y = w * (x * rstd),
// rstd = 1 / sqrt(mean(x^2) + eps) per row, with the statistic accumulated in
// double and rstd saved for the backward pass. The fused forms (the residual
// add before the norm, the residual gradient added to the norm's) give the
// same numbers as the separate ops, one pass fewer over the rows.
#ifndef TETRA_KERNELS_CPU_RMSNORM_H_
#define TETRA_KERNELS_CPU_RMSNORM_H_

#include <cstdint>

namespace tetra::cpu {

// x (rows, dim), w (dim) -> y (rows, dim), rstd (rows).
void RmsNormForward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                    float* rstd);

// sum (rows, dim) = x + delta, then y, rstd = RmsNormForward(sum). With
// round_bf16 the sum is rounded to bf16 before the norm reads it: the values
// a bf16 sum tensor holds, which the norm of a separate add would read.
void AddRmsNormForward(const float* x, const float* delta, const float* w, int64_t rows,
                       int64_t dim, float eps, bool round_bf16, float* sum, float* y, float* rstd);

// dx (rows, dim) written (it may alias dy); dw (dim) accumulated. dw is summed
// over rows in row order by column-owning threads: bit-identical run to run
// and for any thread count. With dx_add (it may alias dx), dx = dx_add + the
// norm's gradient, that gradient first rounded to bf16 when round_bf16: the
// numbers of a separate backward into a bf16 tensor and an add.
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                     int64_t rows, int64_t dim, float* dx, float* dw, const float* dx_add = nullptr,
                     bool round_bf16 = false);
// Either of dx and dw may be null (the halves of a split backward): the
// other is computed as in the whole one.

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_RMSNORM_H_
