#include "core/cuda/device_memory.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/device_work.h"
#include "core/logging.h"

namespace tetra::cuda {
namespace {

std::atomic<int64_t> g_synchronizing{0};

// Whether the current device has a stream-ordered pool; the first time for
// each device, its default pool is told to keep freed memory (the default
// threshold of 0 hands it back to the driver at every synchronisation).
bool PoolReady() {
  static std::mutex mutex;
  static std::set<int> with_pool, without_pool;
  int device = 0;
  TETRA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (with_pool.count(device) > 0) return true;
  if (without_pool.count(device) > 0) return false;
  int supported = 0;
  TETRA_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  if (!supported) {
    TETRA_LOG() << "warning: GPU " << device
                << " has no stream-ordered memory pool: device memory comes from "
                << "cudaMalloc and cudaFree, which wait for the device";
    without_pool.insert(device);
    return false;
  }
  cudaMemPool_t pool = nullptr;
  TETRA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep_all = UINT64_MAX;
  TETRA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  with_pool.insert(device);
  return true;
}

}  // namespace

void* AllocateDeviceBuffer(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 256;  // a distinct address, as cudaMalloc's smallest
  CountDeviceWork(DeviceWork::kAllocation);
  if (PoolReady()) {
    TETRA_CUDA_CHECK(cudaMallocAsync(&p, bytes, CurrentStream()));
  } else {
    g_synchronizing.fetch_add(1, std::memory_order_relaxed);
    TETRA_CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  return p;
}

void FreeDeviceBuffer(void* p) {
  if (p == nullptr) return;
  // Errors are ignored: at exit the runtime may be gone before the last tensor.
  if (PoolReady()) {
    cudaFreeAsync(p, CurrentStream());
  } else {
    g_synchronizing.fetch_add(1, std::memory_order_relaxed);
    cudaFree(p);
  }
}

std::shared_ptr<void> AllocateDeviceStorage(size_t bytes) {
  return std::shared_ptr<void>(AllocateDeviceBuffer(bytes), FreeDeviceBuffer);
}

std::shared_ptr<void> AllocatePinnedStorage(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes == 0 ? 256 : bytes) != cudaSuccess) {
    cudaGetLastError();  // clears the error, which is not sticky
    return nullptr;
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

int64_t SynchronizingAllocations() { return g_synchronizing.load(std::memory_order_relaxed); }

void CopyBytes(void* dst, const void* src, size_t bytes, bool wait) {
  if (bytes == 0) return;
  CountDeviceWork(DeviceWork::kLaunch);
  TETRA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CurrentStream()));
  if (!wait) return;
  CountDeviceWork(DeviceWork::kHostWait);
  TETRA_CUDA_CHECK(cudaStreamSynchronize(CurrentStream()));
}

void ZeroBytes(void* dst, size_t bytes) {
  if (bytes == 0) return;
  CountDeviceWork(DeviceWork::kLaunch);
  TETRA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, CurrentStream()));
}

}  // namespace tetra::cuda
