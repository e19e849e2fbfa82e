// Device reductions to a host number, deterministic (a fixed grid of fp64
// partial sums, then one block summing them in a fixed order): the global
// gradient norm and the loss must not change from run to run.
#ifndef TETRA_KERNELS_CUDA_REDUCE_H_
#define TETRA_KERNELS_CUDA_REDUCE_H_

#include <cstdint>

namespace tetra::cuda {

// sum of values (n) on the device, in fp64; waits for the current stream.
double SumToHost(const float* values, int64_t n);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_REDUCE_H_
