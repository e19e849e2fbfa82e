// The emulated devices' memory, apart from host memory: every allocation is
// its own mapping that ends at an inaccessible guard page, the bytes between
// the allocation's end and the page (up to 255) hold a known pattern checked
// after every kernel, so a write past the end is reported with the allocation
// it overran (copies, memsets and the emulated libraries check their ranges
// before they touch memory). Pinned host memory (cudaMallocHost) is
// recorded so copies can tell it from pageable memory.
#ifndef TETRA_EMULATOR_DEVICE_MEMORY_H_
#define TETRA_EMULATOR_DEVICE_MEMORY_H_

#include <cstddef>
#include <optional>
#include <string>

#include "emulator/emulated_device.h"

namespace tetra::emulator {

// Memory each emulated device reports: an H200's 141 GB, or less when the
// host has less.
size_t DeviceMemoryBytes();

// A new allocation of `bytes` on `device`, 256-byte aligned; nullptr when
// the device's memory is spent.
void* AllocateDevice(size_t bytes, int device);
// Unmaps a live allocation (a bad pointer is a Fail).
void FreeDevice(void* p, const char* call);
size_t AllocatedBytes(int device);

// Fails naming the first allocation of `device` whose bytes past its end
// were written.
void CheckOverruns(int device);

void* AllocatePinned(size_t bytes);
void FreePinned(void* p);

// What kind of memory [p, p + bytes) is: device memory of one allocation,
// pinned host memory, or pageable host memory. A range that starts in a
// device allocation but runs past its end is a Fail naming `call`.
enum class MemoryKind { kDevice, kPinned, kPageable };
MemoryKind KindOf(const void* p, size_t bytes, const char* call);

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_DEVICE_MEMORY_H_
