// Whole-buffer reductions and updates used around the optimizer: sums of
// squares for the global gradient norm, scaling for clipping, accumulation.
#ifndef TETRA_KERNELS_CPU_REDUCE_H_
#define TETRA_KERNELS_CPU_REDUCE_H_

#include <cstdint>

namespace tetra::cpu {

// sum x[i]^2 over x (n), in double. Summed in fixed blocks combined in block
// order, so the result is bit-identical for any thread count.
double SumOfSquares(const float* x, int64_t n);

// x (n) *= s.
void Scale(float* x, int64_t n, float s);

// y (n) += x (n).
void Add(const float* x, float* y, int64_t n);
void Add(const double* x, double* y, int64_t n);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_REDUCE_H_
