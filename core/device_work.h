// What a step asks of a GPU, counted where the asking happens, so a step's
// cost in launches and waits shows on any device, the emulated one included:
// every kernel launch, library call (a cuBLASLt GEMM, a cuDNN attention
// graph, an NCCL collective) and device copy or fill is a launch; every time
// the host blocks on the device (a stream, event or device synchronise, a
// copy waited for) or on a collective is a host wait; every device memory
// allocation, from the pool or not, is an allocation. The counts only grow;
// a step's are the difference across it. Builds without CUDA count nothing
// but collective waits.
#ifndef TETRA_CORE_DEVICE_WORK_H_
#define TETRA_CORE_DEVICE_WORK_H_

#include <cstdint>

namespace tetra {

enum class DeviceWork { kLaunch, kHostWait, kAllocation };

struct DeviceWorkCounts {
  int64_t launches = 0, host_waits = 0, allocations = 0;

  DeviceWorkCounts operator-(const DeviceWorkCounts& earlier) const {
    return {launches - earlier.launches, host_waits - earlier.host_waits,
            allocations - earlier.allocations};
  }
};

// Counts one piece of `kind` (thread-safe).
void CountDeviceWork(DeviceWork kind);
// The counts of this process so far.
DeviceWorkCounts DeviceWorkSoFar();

}  // namespace tetra

#endif  // TETRA_CORE_DEVICE_WORK_H_
