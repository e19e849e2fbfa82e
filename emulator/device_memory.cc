#include "emulator/device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"

namespace tetra::emulator {
namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's
constexpr unsigned char kPattern = 0xA5;

struct Allocation {
  size_t bytes;   // what was asked for
  size_t padded;  // bytes rounded up to kAlignment: [bytes, padded) holds kPattern
  char* mapping;  // the mapping: pages of the allocation, then one guard page
  size_t mapped;
  int device;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> device;  // by first byte
  std::map<uintptr_t, size_t> pinned;
  size_t allocated[64] = {};
};

Registry& Memory() {
  static Registry* registry = new Registry;
  return *registry;
}

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The entry of `map` whose range holds p, or end().
template <typename Map, typename Size>
typename Map::iterator Holding(Map& map, const void* p, Size size_of) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = map.upper_bound(a);
  if (it == map.begin()) return map.end();
  --it;
  return a < it->first + size_of(it->second) ? it : map.end();
}

}  // namespace

size_t DeviceMemoryBytes() {
  constexpr size_t kH200Bytes = 143771ull << 20;
  const size_t host = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * PageBytes();
  return std::min(kH200Bytes, host);
}

void* AllocateDevice(size_t bytes, int device) {
  Registry& memory = Memory();
  const size_t padded = RoundUp(std::max<size_t>(bytes, 1), kAlignment);
  {
    std::lock_guard<std::mutex> lock(memory.mutex);
    if (memory.allocated[device] + padded > DeviceMemoryBytes()) return nullptr;
    memory.allocated[device] += padded;
  }
  const size_t data = RoundUp(padded, PageBytes());
  const size_t mapped = data + PageBytes();
  void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) Fail(absl::StrFormat("cannot map %d bytes of device memory", mapped));
  char* base = static_cast<char*>(mapping);
  mprotect(base + data, PageBytes(), PROT_NONE);
  char* begin = base + data - padded;  // the allocation ends where the guard page starts
  std::memset(begin + bytes, kPattern, padded - bytes);
  std::lock_guard<std::mutex> lock(memory.mutex);
  memory.device[reinterpret_cast<uintptr_t>(begin)] = {bytes, padded, base, mapped, device};
  return begin;
}

void FreeDevice(void* p, const char* call) {
  if (p == nullptr) return;
  Registry& memory = Memory();
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(memory.mutex);
    auto it = memory.device.find(reinterpret_cast<uintptr_t>(p));
    if (it == memory.device.end()) {
      Fail(absl::StrFormat("%s(%p): not the start of a live device allocation", call, p));
    }
    a = it->second;
    memory.device.erase(it);
    memory.allocated[a.device] -= a.padded;
  }
  munmap(a.mapping, a.mapped);
}

size_t AllocatedBytes(int device) {
  std::lock_guard<std::mutex> lock(Memory().mutex);
  return Memory().allocated[device];
}

void CheckOverruns(int device) {
  Registry& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  for (const auto& [begin, a] : memory.device) {
    if (a.device != device) continue;
    const unsigned char* tail = reinterpret_cast<const unsigned char*>(begin) + a.bytes;
    for (size_t i = 0; i < a.padded - a.bytes; ++i) {
      if (tail[i] != kPattern) {
        Fail(
            absl::StrFormat("a write past the end of the %d-byte device allocation at %#x: "
                            "byte %d (%d past its end) was written",
                            a.bytes, begin, a.bytes + i, i + 1));
      }
    }
  }
}

void* AllocatePinned(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, RoundUp(std::max<size_t>(bytes, 1), kAlignment));
  std::lock_guard<std::mutex> lock(Memory().mutex);
  Memory().pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void FreePinned(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(Memory().mutex);
    if (Memory().pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
      Fail(absl::StrFormat("cudaFreeHost(%p): not memory from cudaMallocHost", p));
    }
  }
  std::free(p);
}

MemoryKind KindOf(const void* p, size_t bytes, const char* call) {
  Registry& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  auto device = Holding(memory.device, p, [](const Allocation& a) { return a.bytes; });
  if (device != memory.device.end()) {
    const uintptr_t end = device->first + device->second.bytes;
    if (reinterpret_cast<uintptr_t>(p) + bytes > end) {
      Fail(absl::StrFormat(
          "%s: %d bytes at %p run %d bytes past the end of their %d-byte device "
          "allocation",
          call, bytes, p, reinterpret_cast<uintptr_t>(p) + bytes - end, device->second.bytes));
    }
    return MemoryKind::kDevice;
  }
  if (Holding(memory.pinned, p, [](size_t n) { return n; }) != memory.pinned.end()) {
    return MemoryKind::kPinned;
  }
  return MemoryKind::kPageable;
}

std::optional<DeviceRange> FindDeviceRange(const void* p, size_t bytes) {
  Registry& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  auto it = Holding(memory.device, p, [](const Allocation& a) { return a.bytes; });
  if (it == memory.device.end()) return std::nullopt;
  if (reinterpret_cast<uintptr_t>(p) + bytes > it->first + it->second.bytes) return std::nullopt;
  return DeviceRange{reinterpret_cast<char*>(it->first), it->second.bytes, it->second.device};
}

}  // namespace tetra::emulator
