// CUDA resources the kernels share, created on first use (the first step)
// and kept: the process's cuBLASLt handle, and per stream (the op API's
// current one) a GEMM workspace and a scratch buffer that only grows, so
// steady-state steps never allocate and kernels on another stream never race
// them.
#ifndef TETRA_KERNELS_CUDA_CONTEXT_H_
#define TETRA_KERNELS_CUDA_CONTEXT_H_

#include <cublasLt.h>

#include <cstddef>

namespace tetra::cuda {

cublasLtHandle_t CublasLtHandle();
void* GemmWorkspace();                                    // the current stream's
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // as PyTorch on Hopper

// At least `bytes` of device memory, valid until the next Scratch call on
// this stream; one op uses it at a time on the current stream.
void* Scratch(size_t bytes);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_CONTEXT_H_
