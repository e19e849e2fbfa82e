// The emulated CUDA runtime: the entry points of cuda_runtime_api.h over the
// emulator's devices (TETRA_EMU_GPUS of them, default 8, each an H200 in
// name and limits), memory (device_memory.h), streams and events
// (streams.h) and kernel engine (kernel_engine.h).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/debugging/symbolize.h"
#include "absl/strings/str_format.h"
#include "emulator/device_memory.h"
#include "emulator/emulated_device.h"
#include "emulator/failure.h"
#include "emulator/kernel_engine.h"
#include "emulator/kernel_launch.h"
#include "emulator/streams.h"

namespace tetra::emulator {
namespace {

// An H200's (sm_90) limits.
constexpr int kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr int kDefaultSharedBytes = 48 << 10;
constexpr int kMaxSharedBytes = 227 << 10;
constexpr int kMultiprocessors = 132;

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

int DeviceCount() {
  static const int count = [] {
    const char* text = std::getenv("TETRA_EMU_GPUS");
    if (text == nullptr) return 8;
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || n < 0 || n > 64) {
      Fail(absl::StrFormat("TETRA_EMU_GPUS=%s is not a device count from 0 to 64", text));
    }
    return static_cast<int>(n);
  }();
  return count;
}

cudaError_t Record(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

// A refused call: says why on stderr (the real runtime only returns the code).
cudaError_t Refuse(cudaError_t error, const std::string& why) {
  Explain(why);
  return Record(error);
}

struct Kernels {
  std::mutex mutex;
  std::map<const void*, int> max_shared;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  std::map<const void*, std::string> names;
};

Kernels& AllKernels() {
  static Kernels* kernels = new Kernels;
  return *kernels;
}

// With TETRA_EMU_LAUNCH_LOG=DIR, each kernel's name is appended to DIR/<pid>
// at its first launch in the process (tests/emulator/check_kernel_coverage.py
// reads them: every __global__ kernel must have run in the emulated suite).
void LogFirstLaunch(const std::string& name) {
  static const char* dir = std::getenv("TETRA_EMU_LAUNCH_LOG");
  if (dir == nullptr) return;
  const std::string path = absl::StrFormat("%s/%d", dir, getpid());
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%s\n", name.c_str());
    std::fclose(f);
  }
}

// "tetra::cuda::RmsNormKernel<float>" for the kernel's address, from the
// binary's symbol table.
std::string KernelName(const void* kernel) {
  Kernels& kernels = AllKernels();
  std::lock_guard<std::mutex> lock(kernels.mutex);
  auto [it, added] = kernels.names.try_emplace(kernel);
  if (added) {
    char symbol[1024];
    if (absl::Symbolize(const_cast<void*>(kernel), symbol, sizeof(symbol))) {
      std::string name = symbol;
      for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) {
        name.erase(at, 23);
      }
      if (!name.empty() && name.back() == ')') {  // drop the parameter list
        int depth = 0;
        for (size_t i = name.size(); i-- > 0;) {
          depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
          if (depth == 0) {
            name.resize(i);
            break;
          }
        }
      }
      it->second = name;
    } else {
      it->second = absl::StrFormat("the kernel at %p", kernel);
    }
    LogFirstLaunch(it->second);
  }
  return it->second;
}

int MaxShared(const void* kernel) {
  std::lock_guard<std::mutex> lock(AllKernels().mutex);
  auto it = AllKernels().max_shared.find(kernel);
  return it == AllKernels().max_shared.end() ? kDefaultSharedBytes : it->second;
}

uint64_t NextSeed() {
  static const uint64_t base = [] {
    const char* text = std::getenv("TETRA_EMU_SEED");
    return text == nullptr ? uint64_t{1} : std::strtoull(text, nullptr, 10);
  }();
  static std::atomic<uint64_t> launches{0};
  return base * 0x9E3779B97F4A7C15ull + launches.fetch_add(1);
}

const char* KindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kDevice:
      return "device memory";
    case MemoryKind::kPinned:
      return "pinned host memory";
    case MemoryKind::kPageable:
      return "pageable host memory";
  }
  return "memory";
}

const char* CopyName(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault:
      return "cudaMemcpyDefault";
  }
  return "an unknown copy kind";
}

// A copy of `height` rows of `width` bytes (rows `pitch` bytes apart) on
// `stream`, as the runtime does it: from pageable memory the source is
// taken at the call (the host may reuse it on return); into pageable memory
// the host waits for the copy; everything else is asynchronous, so a host
// read before the stream is waited for sees what was there before.
cudaError_t Copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 size_t height, cudaMemcpyKind kind, cudaStream_t stream, const char* call) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (height > 1 && (width > dst_pitch || width > src_pitch)) {
    return Refuse(cudaErrorInvalidPitchValue,
                  absl::StrFormat("%s: rows of %d bytes but pitches %d and %d", call, width,
                                  dst_pitch, src_pitch));
  }
  const size_t dst_span = dst_pitch * (height - 1) + width;
  const size_t src_span = src_pitch * (height - 1) + width;
  const MemoryKind to = KindOf(dst, dst_span, call), from = KindOf(src, src_span, call);
  const bool to_device = to == MemoryKind::kDevice, from_device = from == MemoryKind::kDevice;
  const bool matches = kind == cudaMemcpyDefault ||
                       (kind == cudaMemcpyHostToHost && !to_device && !from_device) ||
                       (kind == cudaMemcpyHostToDevice && to_device && !from_device) ||
                       (kind == cudaMemcpyDeviceToHost && !to_device && from_device) ||
                       (kind == cudaMemcpyDeviceToDevice && to_device && from_device);
  if (!matches) {
    Fail(absl::StrFormat("%s with %s from %p (%s) to %p (%s): the pointers do not match the kind",
                         call, CopyName(kind), src, KindName(from), dst, KindName(to)));
  }
  auto rows = [=](char* to_rows, const char* from_rows, size_t from_pitch) {
    for (size_t r = 0; r < height; ++r) {
      std::memcpy(to_rows + r * dst_pitch, from_rows + r * from_pitch, width);
    }
  };
  char* const out = static_cast<char*>(dst);
  if (from == MemoryKind::kPageable) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + src_span);
    Enqueue(stream, [=] { rows(out, staged->data(), src_pitch); });
  } else {
    Enqueue(stream, [=] { rows(out, static_cast<const char*>(src), src_pitch); });
  }
  if (to == MemoryKind::kPageable) WaitForStream(stream);
  return cudaSuccess;
}

cudaError_t CheckDevice(int device) {
  return device < 0 || device >= DeviceCount() ? Record(cudaErrorInvalidDevice) : cudaSuccess;
}

}  // namespace

int CurrentDevice() { return current_device; }

void LaunchKernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, std::function<void()> thread) {
  const std::string name = KernelName(kernel);
  const unsigned grid_dims[3] = {grid.x, grid.y, grid.z};
  const unsigned block_dims[3] = {block.x, block.y, block.z};
  const char axes[3] = {'x', 'y', 'z'};
  for (int i = 0; i < 3; ++i) {
    if (grid_dims[i] == 0 || grid_dims[i] > kMaxGridDim[i]) {
      Refuse(cudaErrorInvalidConfiguration,
             absl::StrFormat("launch of %s refused: grid %c of %u is outside [1, %u]", name,
                             axes[i], grid_dims[i], kMaxGridDim[i]));
      return;
    }
    if (block_dims[i] == 0 || block_dims[i] > kMaxBlockDim[i]) {
      Refuse(cudaErrorInvalidConfiguration,
             absl::StrFormat("launch of %s refused: block %c of %u is outside [1, %u]", name,
                             axes[i], block_dims[i], kMaxBlockDim[i]));
      return;
    }
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > kMaxThreadsPerBlock) {
    Refuse(cudaErrorInvalidConfiguration,
           absl::StrFormat("launch of %s refused: %d threads per block, above %d", name, threads,
                           kMaxThreadsPerBlock));
    return;
  }
  const int max_shared = MaxShared(kernel);
  if (shared_bytes > static_cast<size_t>(max_shared)) {
    Refuse(cudaErrorInvalidValue,
           absl::StrFormat("launch of %s refused: %d bytes of dynamic shared memory, above the "
                           "kernel's limit of %d (raise it with cudaFuncSetAttribute("
                           "cudaFuncAttributeMaxDynamicSharedMemorySize), up to %d)",
                           name, shared_bytes, max_shared, kMaxSharedBytes));
    return;
  }
  auto run = std::make_shared<KernelRun>(
      KernelRun{name, grid, block, shared_bytes, std::move(thread), NextSeed()});
  const int device = StreamDevice(Resolve(stream, CurrentDevice()));
  Enqueue(stream, [run, device] {
    RunningScope scope("kernel " + run->name);
    RunKernel(*run);
    CheckOverruns(device);  // within the kernel's scope: the message names it
  });
}

void CheckVectorAccess(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    Fail(absl::StrFormat("misaligned 16-byte %s at %p (%d bytes past a 16-byte boundary)", what, p,
                         reinterpret_cast<uintptr_t>(p) % 16));
  }
  if (!FindDeviceRange(p, 16)) {
    Fail(absl::StrFormat("16-byte %s at %p is not inside one device allocation", what, p));
  }
}

}  // namespace tetra::emulator

using tetra::emulator::CurrentDevice;
namespace emulator = tetra::emulator;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emulator::DeviceCount();
  return *count == 0 ? emulator::Record(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = emulator::CheckDevice(device); e != cudaSuccess) return e;
  emulator::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = emulator::current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (cudaError_t e = emulator::CheckDevice(device); e != cudaSuccess) return e;
  *prop = {};
  std::snprintf(prop->name, sizeof(prop->name), "NVIDIA H200");
  prop->totalGlobalMem = emulator::DeviceMemoryBytes();
  prop->sharedMemPerBlock = emulator::kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = emulator::kMaxSharedBytes;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = emulator::kMaxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = static_cast<int>(emulator::kMaxBlockDim[i]);
    prop->maxGridSize[i] = static_cast<int>(emulator::kMaxGridDim[i]);
  }
  prop->clockRate = 1980000;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = emulator::kMultiprocessors;
  prop->memoryClockRate = 3201000;
  prop->memoryBusWidth = 6144;
  prop->l2CacheSize = 50 << 20;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (cudaError_t e = emulator::CheckDevice(device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = emulator::kMaxThreadsPerBlock;
      break;
    case cudaDevAttrMaxGridDimY:
      *value = 65535;
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = 65535;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = emulator::kMultiprocessors;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = emulator::kMaxSharedBytes;
      break;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      break;
    default:
      return emulator::Record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  emulator::SynchronizeDevice(CurrentDevice());
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = emulator::DeviceMemoryBytes();
  *free = *total - emulator::AllocatedBytes(CurrentDevice());
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = emulator::last_error;
  emulator::last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return emulator::last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return cudaGetErrorName(error);
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  // cudaMalloc waits for the device before it returns, as the driver does.
  emulator::SynchronizeDevice(CurrentDevice());
  *ptr = emulator::AllocateDevice(bytes, CurrentDevice());
  return *ptr == nullptr ? emulator::Record(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  emulator::SynchronizeDevice(CurrentDevice());  // cudaFree synchronises the device
  emulator::FreeDevice(ptr, "cudaFree");
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  emulator::Resolve(stream, CurrentDevice());
  *ptr = emulator::AllocateDevice(bytes, CurrentDevice());
  return *ptr == nullptr ? emulator::Record(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  // Stream-ordered: the memory goes back once the work posted before has run.
  emulator::Enqueue(stream, [ptr] { emulator::FreeDevice(ptr, "cudaFreeAsync"); });
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = emulator::AllocatePinned(bytes);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  emulator::SynchronizeDevice(CurrentDevice());
  emulator::FreePinned(ptr);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (cudaError_t e = emulator::CheckDevice(device); e != cudaSuccess) return e;
  // A handle only: the emulated pool is the allocator itself.
  *pool = reinterpret_cast<cudaMemPool_t>(static_cast<uintptr_t>(device + 1));
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr || attr != cudaMemPoolAttrReleaseThreshold) {
    return emulator::Record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e =
      emulator::Copy(dst, bytes, src, bytes, bytes, 1, kind, nullptr, "cudaMemcpy");
  emulator::WaitForStream(nullptr);
  return e;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return emulator::Copy(dst, bytes, src, bytes, bytes, 1, kind, stream, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return emulator::Copy(dst, dst_pitch, src, src_pitch, width, height, kind, stream,
                        "cudaMemcpy2DAsync");
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (emulator::KindOf(dst, bytes, "cudaMemsetAsync") != emulator::MemoryKind::kDevice) {
    emulator::Fail(
        absl::StrFormat("cudaMemsetAsync of %d bytes at %p: not device memory", bytes, dst));
  }
  emulator::Enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr);
  emulator::WaitForStream(nullptr);
  return e;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = emulator::CreateStream(CurrentDevice());
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  return cudaStreamCreate(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  emulator::DestroyStream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  emulator::WaitForStream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return emulator::StreamIdle(stream) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  emulator::StreamWaitEvent(stream, event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = emulator::CreateEvent(true);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = emulator::CreateEvent((flags & cudaEventDisableTiming) == 0);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  emulator::DestroyEvent(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  emulator::RecordEvent(event, stream);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return emulator::EventDone(event) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  emulator::WaitForEvent(event);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return emulator::Record(emulator::ElapsedMs(start, end, ms));
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return emulator::Record(cudaErrorInvalidValue);
  }
  if (value < 0 || value > emulator::kMaxSharedBytes) {
    return emulator::Refuse(cudaErrorInvalidValue,
                            absl::StrFormat("cudaFuncSetAttribute: %d bytes of dynamic shared "
                                            "memory, above an H200's %d",
                                            value, emulator::kMaxSharedBytes));
  }
  std::lock_guard<std::mutex> lock(emulator::AllKernels().mutex);
  emulator::AllKernels().max_shared[func] = value;
  return cudaSuccess;
}
