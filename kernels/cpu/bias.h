// Biases of linear layers (Qwen2's q, k and v projections): added to every
// row of the projection's output, and their gradient, the sum of the output
// gradient's rows.
#ifndef TETRA_KERNELS_CPU_BIAS_H_
#define TETRA_KERNELS_CPU_BIAS_H_

#include <cstdint>

namespace tetra::cpu {

// y (rows, width) += bias (width) on every row.
void AddBias(const float* bias, int64_t rows, int64_t width, float* y);

// dbias (width) += sum over rows of dy (rows, width), each column summed in
// fp32 in row order (as the device sums it, so both give the same bits).
void BiasGradient(const float* dy, int64_t rows, int64_t width, float* dbias);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_BIAS_H_
