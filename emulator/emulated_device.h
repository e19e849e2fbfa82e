// What the emulated libraries (cuBLASLt, NCCL) need from the emulated CUDA
// runtime: posting work on a stream, finding the device allocation a pointer
// belongs to, and failing the way a device fault fails, with a message.
#ifndef TETRA_EMULATOR_EMULATED_DEVICE_H_
#define TETRA_EMULATOR_EMULATED_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string_view>

namespace tetra::emulator {

// Prints "tetra emulated GPU: <what>" (with the kernel or library call being
// run, when there is one) and aborts the process: the emulator's report of
// what a real device would fault on or refuse.
[[noreturn]] void Fail(std::string_view what);

// Runs `work` on `stream`'s worker thread once everything posted on that
// stream before it has run (nullptr: the current device's default stream).
// The host does not wait.
void Enqueue(cudaStream_t stream, std::function<void()> work);

// Waits until everything posted on `stream` so far has run.
void WaitForStream(cudaStream_t stream);

// One device allocation: [begin, begin + bytes) on emulated device `device`.
struct DeviceRange {
  char* begin;
  size_t bytes;
  int device;
};

// The live device allocation holding all of [p, p + bytes), or nullopt when
// no single one does (a host pointer, a freed one, a range running past the end).
std::optional<DeviceRange> FindDeviceRange(const void* p, size_t bytes);

// This host thread's device (cudaSetDevice's).
int CurrentDevice();

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_EMULATED_DEVICE_H_
