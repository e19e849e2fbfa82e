#include "core/device_work.h"

#include <atomic>

namespace tetra {
namespace {

std::atomic<int64_t> counts[3];

}  // namespace

void CountDeviceWork(DeviceWork kind) {
  counts[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
}

DeviceWorkCounts DeviceWorkSoFar() {
  return {counts[0].load(std::memory_order_relaxed), counts[1].load(std::memory_order_relaxed),
          counts[2].load(std::memory_order_relaxed)};
}

}  // namespace tetra
