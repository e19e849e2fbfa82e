#include "core/cuda/device.h"

#include "core/cuda/cuda_check.h"
#include "core/device_work.h"

namespace tetra::cuda {

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why != nullptr) {
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status);
    }
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount reports no CUDA device";
  return count;
}

void SetDevice(int device) { TETRA_CUDA_CHECK(cudaSetDevice(device)); }

int CurrentDevice() {
  int device = 0;
  TETRA_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::string CurrentDeviceName() {
  cudaDeviceProp prop;
  TETRA_CUDA_CHECK(cudaGetDeviceProperties(&prop, CurrentDevice()));
  return prop.name;
}

DeviceMemory CurrentDeviceMemory() {
  DeviceMemory memory;
  TETRA_CUDA_CHECK(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
  return memory;
}

void Synchronize() {
  CountDeviceWork(DeviceWork::kHostWait);
  SynchronizeUncounted();
}

void SynchronizeUncounted() { TETRA_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace tetra::cuda
