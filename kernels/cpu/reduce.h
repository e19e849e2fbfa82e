// Whole-buffer reductions and updates used around the optimizer: sums of
// squares for the global gradient norm, scaling for clipping, accumulation.
#ifndef TETRA_KERNELS_CPU_REDUCE_H_
#define TETRA_KERNELS_CPU_REDUCE_H_

#include <cstdint>
#include <vector>

namespace tetra::cpu {

// sum x[i]^2 over x (n), in double. Summed in fixed blocks combined in block
// order, so the result is bit-identical for any thread count.
double SumOfSquares(const float* x, int64_t n);

// sum over k of weights[k] x SumOfSquares(xs[k], sizes[k]), added in list
// order: the same bits as one SumOfSquares per tensor summed by the caller.
double WeightedSumOfSquares(const std::vector<const float*>& xs, const std::vector<int64_t>& sizes,
                            const std::vector<double>& weights);

// x (n) *= s.
void Scale(float* x, int64_t n, float s);

// out (n) = x (n) + y (n); out may be x or y.
void Add(const float* x, const float* y, float* out, int64_t n);
void Add(const double* x, const double* y, double* out, int64_t n);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_REDUCE_H_
