// The emulated device's kernel launch: kernels/cuda/launch.cuh calls it
// where nvcc's <<<grid, block, shared_bytes, stream>>> would launch.
#ifndef TETRA_EMULATOR_KERNEL_LAUNCH_H_
#define TETRA_EMULATOR_KERNEL_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <functional>

namespace tetra::emulator {

// Checks the launch against an H200's limits (threads per block, grid
// dimensions, dynamic shared memory against the kernel's attribute); a
// refused launch runs nothing and is cudaGetLastError's next error, as on a
// GPU. Otherwise posts the grid on `stream`; `thread` is one CUDA thread's
// work (the kernel called with its arguments).
void LaunchKernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, std::function<void()> thread);

// A 16-byte vector load or store at p: fails unless p is 16-byte aligned
// and the 16 bytes lie in one device allocation.
void CheckVectorAccess(const void* p, const char* what);

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_KERNEL_LAUNCH_H_
