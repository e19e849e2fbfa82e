// Fatal checks for CUDA runtime and cuBLAS(Lt) calls: a failed call is a
// broken invariant (or a dead device), so it aborts through TETRA_CHECK, which
// prints file:line, rank and host. The NCCL twin lives beside the NCCL
// communicator (comm/cuda/), the only code that links NCCL.
#ifndef TETRA_CORE_CUDA_CUDA_CHECK_H_
#define TETRA_CORE_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/logging.h"

#define TETRA_CUDA_CHECK(call)                                          \
  do {                                                                  \
    const cudaError_t tetra_cuda_status = (call);                       \
    TETRA_CHECK(tetra_cuda_status == cudaSuccess)                       \
        << #call << ": " << cudaGetErrorName(tetra_cuda_status) << " (" \
        << cudaGetErrorString(tetra_cuda_status) << ")";                \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, faults in
// the kernel at the next synchronising call.
#define TETRA_CUDA_CHECK_LAUNCH() TETRA_CUDA_CHECK(cudaGetLastError())

#define TETRA_CUBLAS_CHECK(call)                                        \
  do {                                                                  \
    const cublasStatus_t tetra_cublas_status = (call);                  \
    TETRA_CHECK(tetra_cublas_status == CUBLAS_STATUS_SUCCESS)           \
        << #call << ": " << cublasLtGetStatusName(tetra_cublas_status); \
  } while (0)

#endif  // TETRA_CORE_CUDA_CUDA_CHECK_H_
