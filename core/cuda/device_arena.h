// Device memory for tensors. A DeviceArena is one cudaMalloc carved by bump
// allocation: the model's parameters, gradients, optimizer state and
// activation buffers come from it, so the step loop never calls cudaMalloc
// (which synchronises the device). Memory returns only when the arena dies.
// Without an installed arena, device tensors fall back to cudaMalloc/cudaFree
// (tests, tools), and the fallback is counted so a run can check it stays 0.
#ifndef TETRA_CORE_CUDA_DEVICE_ARENA_H_
#define TETRA_CORE_CUDA_DEVICE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tetra::cuda {

class DeviceArena {
 public:
  // Reserves `capacity` bytes on the current device (checked).
  explicit DeviceArena(size_t capacity);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // `bytes` rounded up to kAlignment; a full arena is fatal, naming the sizes.
  void* Allocate(size_t bytes);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

  static constexpr size_t kAlignment = 256;  // cudaMalloc's own alignment

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

// Tensors allocated on the device by this thread while `arena` is installed
// draw from it; pass nullptr to go back to cudaMalloc. The arena must outlive
// every tensor drawn from it.
void InstallDeviceArena(DeviceArena* arena);
DeviceArena* InstalledDeviceArena();

// Storage for a device tensor: from the installed arena, or cudaMalloc'd and
// freed with the last reference.
std::shared_ptr<void> AllocateDeviceStorage(size_t bytes);
// Page-locked host memory (cudaMallocHost), freed with the last reference;
// null where the runtime cannot give it (no driver or no device).
std::shared_ptr<void> AllocatePinnedStorage(size_t bytes);
// cudaMalloc calls made by AllocateDeviceStorage (outside any arena).
int64_t DeviceMallocCount();

// Byte copies and zeroing on the current stream. CopyBytes handles every
// direction (unified addressing); with `wait` it returns once the copy is
// done, so host memory may be read or reused at once (device-to-device
// copies need not wait: the stream orders them).
void CopyBytes(void* dst, const void* src, size_t bytes, bool wait = true);
void ZeroBytes(void* dst, size_t bytes);

}  // namespace tetra::cuda

#endif  // TETRA_CORE_CUDA_DEVICE_ARENA_H_
