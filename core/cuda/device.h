// The CUDA devices of this process: how many there are (0, not a crash, where
// there is no driver or no GPU, so tests can skip), which one this rank uses,
// its name (the peak-FLOP table keys on it) and its free memory.
#ifndef TETRA_CORE_CUDA_DEVICE_H_
#define TETRA_CORE_CUDA_DEVICE_H_

#include <cstddef>
#include <string>

namespace tetra::cuda {

// Number of usable devices; 0 when the runtime reports none or fails to start
// (no driver, no device). `why`, when not null, receives the reason for 0.
int DeviceCount(std::string* why = nullptr);

// Makes `device` current for this thread (checked).
void SetDevice(int device);
int CurrentDevice();

// cudaDeviceProp::name of the current device, e.g. "NVIDIA H200".
std::string CurrentDeviceName();

// Free and total bytes of the current device's memory (cudaMemGetInfo, checked).
struct DeviceMemory {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemory CurrentDeviceMemory();

// Waits for all work on the current device (checked: reports kernel faults),
// a host wait (core/device_work.h).
void Synchronize();
// The same, not counted: the op profile's own waits are not the step's.
void SynchronizeUncounted();

}  // namespace tetra::cuda

#endif  // TETRA_CORE_CUDA_DEVICE_H_
