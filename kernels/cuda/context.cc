#include "kernels/cuda/context.h"

#include "core/cuda/cuda_check.h"

namespace tetra::cuda {

cublasLtHandle_t CublasLtHandle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    TETRA_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

void* GemmWorkspace() {
  static void* workspace = [] {
    void* p = nullptr;
    TETRA_CUDA_CHECK(cudaMalloc(&p, kGemmWorkspaceBytes));
    return p;
  }();
  return workspace;
}

void* Scratch(size_t bytes) {
  static void* buffer = nullptr;
  static size_t capacity = 0;
  if (bytes > capacity) {
    if (buffer != nullptr) TETRA_CUDA_CHECK(cudaFree(buffer));  // synchronises: no user left
    capacity = bytes;
    TETRA_CUDA_CHECK(cudaMalloc(&buffer, capacity));
  }
  return buffer;
}

}  // namespace tetra::cuda
