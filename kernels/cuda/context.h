// Per-process CUDA resources the kernels share, created on first use (the
// first step) and kept: the cuBLASLt handle and workspace, and a scratch
// buffer that only grows, so steady-state steps never allocate.
#ifndef TETRA_KERNELS_CUDA_CONTEXT_H_
#define TETRA_KERNELS_CUDA_CONTEXT_H_

#include <cublasLt.h>

#include <cstddef>

namespace tetra::cuda {

cublasLtHandle_t CublasLtHandle();
void* GemmWorkspace();
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // as PyTorch on Hopper

// At least `bytes` of device memory, valid until the next Scratch call; one
// op uses it at a time on the current stream.
void* Scratch(size_t bytes);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_CONTEXT_H_
