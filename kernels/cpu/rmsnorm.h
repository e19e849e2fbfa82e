// RMSNorm as Hugging Face's LlamaRMSNorm computes it: y = w * (x * rstd),
// rstd = 1 / sqrt(mean(x^2) + eps) per row, with the statistic accumulated in
// double and rstd saved for the backward pass.
#ifndef TETRA_KERNELS_CPU_RMSNORM_H_
#define TETRA_KERNELS_CPU_RMSNORM_H_

#include <cstdint>

namespace tetra::cpu {

// x (rows, dim), w (dim) -> y (rows, dim), rstd (rows).
void RmsNormForward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                    float* rstd);

// dx (rows, dim) written (it may alias dy); dw (dim) accumulated. dw is summed
// over rows in row order by column-owning threads: bit-identical run to run
// and for any thread count.
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                     int64_t rows, int64_t dim, float* dx, float* dw);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_RMSNORM_H_
