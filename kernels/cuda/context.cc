#include "kernels/cuda/context.h"

#include <unordered_map>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"

namespace tetra::cuda {

cublasLtHandle_t CublasLtHandle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    TETRA_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

namespace {

// A stream's own buffers: kernels on two streams (compute, and anything
// enqueued beside it) never share one.
struct StreamBuffers {
  void* workspace = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

StreamBuffers& CurrentStreamBuffers() {
  static std::unordered_map<cudaStream_t, StreamBuffers> buffers;
  return buffers[CurrentStream()];
}

}  // namespace

void* GemmWorkspace() {
  StreamBuffers& mine = CurrentStreamBuffers();
  if (mine.workspace == nullptr) mine.workspace = AllocateDeviceBuffer(kGemmWorkspaceBytes);
  return mine.workspace;
}

void* Scratch(size_t bytes) {
  StreamBuffers& mine = CurrentStreamBuffers();
  if (bytes > mine.scratch_bytes) {
    // Stream-ordered: the old buffer goes back once the work queued on it has run.
    FreeDeviceBuffer(mine.scratch);
    mine.scratch_bytes = bytes;
    mine.scratch = AllocateDeviceBuffer(mine.scratch_bytes);
  }
  return mine.scratch;
}

}  // namespace tetra::cuda
