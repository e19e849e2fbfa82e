#include "core/cuda/device_arena.h"

#include <atomic>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace tetra::cuda {
namespace {
thread_local DeviceArena* g_arena = nullptr;
std::atomic<int64_t> g_malloc_count{0};
}  // namespace

DeviceArena::DeviceArena(size_t capacity) : capacity_(capacity) {
  TETRA_CUDA_CHECK(cudaMalloc(&base_, capacity_ == 0 ? kAlignment : capacity_));
}

DeviceArena::~DeviceArena() {
  if (g_arena == this) g_arena = nullptr;
  cudaFree(base_);
}

void* DeviceArena::Allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  TETRA_CHECK(rounded <= capacity_ - used_)
      << "device arena full: " << bytes << " bytes requested, " << used_ << " of " << capacity_
      << " used";
  void* p = base_ + used_;
  used_ += rounded;
  return p;
}

void InstallDeviceArena(DeviceArena* arena) { g_arena = arena; }
DeviceArena* InstalledDeviceArena() { return g_arena; }

std::shared_ptr<void> AllocateDeviceStorage(size_t bytes) {
  if (g_arena != nullptr) return std::shared_ptr<void>(g_arena->Allocate(bytes), [](void*) {});
  void* p = nullptr;
  TETRA_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? DeviceArena::kAlignment : bytes));
  g_malloc_count.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

std::shared_ptr<void> AllocatePinnedStorage(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes == 0 ? DeviceArena::kAlignment : bytes) != cudaSuccess) {
    cudaGetLastError();  // clears the error, which is not sticky
    return nullptr;
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

int64_t DeviceMallocCount() { return g_malloc_count.load(std::memory_order_relaxed); }

void CopyBytes(void* dst, const void* src, size_t bytes, bool wait) {
  if (bytes == 0) return;
  TETRA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CurrentStream()));
  if (wait) TETRA_CUDA_CHECK(cudaStreamSynchronize(CurrentStream()));
}

void ZeroBytes(void* dst, size_t bytes) {
  if (bytes == 0) return;
  TETRA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, CurrentStream()));
}

}  // namespace tetra::cuda
