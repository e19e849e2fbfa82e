// Device memory for tensors and for the kernels' own buffers, from the
// device's stream-ordered pool: cudaMallocAsync on the current stream, and
// cudaFreeAsync on the stream current when the memory is let go, with the
// pool keeping what is freed for the next allocation (its release threshold
// is unlimited). So a training step takes and returns memory without a
// driver call that waits for the device: cudaMalloc and cudaFree each
// synchronise it, which kills overlap and can deadlock ranks whose NCCL
// kernels wait on each other. They run only where a device has no memory
// pools, and are counted, so a run can check that its steps make none.
#ifndef TETRA_CORE_CUDA_DEVICE_MEMORY_H_
#define TETRA_CORE_CUDA_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tetra::cuda {

// Storage for a device tensor, returned to the pool with the last reference.
std::shared_ptr<void> AllocateDeviceStorage(size_t bytes);
// The same for a kernel's own buffer (a workspace, scratch that grows),
// returned with FreeDeviceBuffer.
void* AllocateDeviceBuffer(size_t bytes);
void FreeDeviceBuffer(void* p);
// Page-locked host memory (cudaMallocHost), freed with the last reference;
// null where the runtime cannot give it (no driver or no device).
std::shared_ptr<void> AllocatePinnedStorage(size_t bytes);
// cudaMalloc and cudaFree calls made so far for device memory (each
// synchronises the device): 0 where the device has memory pools.
int64_t SynchronizingAllocations();

// Byte copies and zeroing on the current stream. CopyBytes handles every
// direction (unified addressing); with `wait` it returns once the copy is
// done, so host memory may be read or reused at once (device-to-device
// copies need not wait: the stream orders them).
void CopyBytes(void* dst, const void* src, size_t bytes, bool wait = true);
void ZeroBytes(void* dst, size_t bytes);

}  // namespace tetra::cuda

#endif  // TETRA_CORE_CUDA_DEVICE_MEMORY_H_
