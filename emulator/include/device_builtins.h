// What a .cu file sees of the device when compiled for the emulated GPU: the
// function qualifiers (empty), shared memory, the built-in indices, barriers,
// warp shuffles, atomics and the device math tetra's kernels use. Every CUDA
// thread is a fiber (emulator/kernel_engine.h); the built-ins read and
// synchronise the fiber running now, with CUDA's rules checked.
#ifndef TETRA_EMULATOR_INCLUDE_DEVICE_BUILTINS_H_
#define TETRA_EMULATOR_INCLUDE_DEVICE_BUILTINS_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "vector_types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __grid_constant__
// A block's threads are fibers on one host thread, which runs one block at a
// time: a thread_local static is one block's shared variable.
#define __shared__ static thread_local

namespace tetra::emulator {

// The built-in indices of the CUDA thread running now.
struct ThreadIndices {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadIndices& CurrentIndices();

void SyncThreads();
// One warp-wide operation: every lane named in `mask` must reach it with the
// same mask; lane i then receives `value` of lane source[i] (sources are
// computed per lane by the caller's rule). Returns this lane's result.
enum class WarpOp { kSyncWarp, kShuffle, kShuffleXor };
uint64_t WarpExchange(WarpOp op, unsigned mask, uint64_t value, int source_lane);
int CurrentLane();
[[noreturn]] void Trap();
void* DynamicSharedMemory();

template <typename T>
T Shuffle(WarpOp op, unsigned mask, T value, int source_lane) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
  uint64_t raw = 0;
  std::memcpy(&raw, &value, sizeof(T));
  raw = WarpExchange(op, mask, raw, source_lane);
  T out;
  std::memcpy(&out, &raw, sizeof(T));
  return out;
}

}  // namespace tetra::emulator

#define threadIdx (::tetra::emulator::CurrentIndices().thread_idx)
#define blockIdx (::tetra::emulator::CurrentIndices().block_idx)
#define blockDim (::tetra::emulator::CurrentIndices().block_dim)
#define gridDim (::tetra::emulator::CurrentIndices().grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { ::tetra::emulator::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::tetra::emulator::WarpExchange(::tetra::emulator::WarpOp::kSyncWarp, mask, 0,
                                  ::tetra::emulator::CurrentLane());
}

// CUDA's rules: the source lane is taken within the lane's segment of `width`
// lanes; an xor partner outside the segment gives the lane its own value.
template <typename T>
T __shfl_sync(unsigned mask, T value, int source, int width = warpSize) {
  const int lane = ::tetra::emulator::CurrentLane();
  const int from = (lane & ~(width - 1)) | (source & (width - 1));
  return ::tetra::emulator::Shuffle(::tetra::emulator::WarpOp::kShuffle, mask, value, from);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  const int lane = ::tetra::emulator::CurrentLane();
  int from = lane ^ lane_mask;
  if ((from & ~(width - 1)) != (lane & ~(width - 1))) from = lane;
  return ::tetra::emulator::Shuffle(::tetra::emulator::WarpOp::kShuffleXor, mask, value, from);
}

// Atomics are real atomics: blocks of different streams run at once.
template <typename T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}

[[noreturn]] inline void __trap() { ::tetra::emulator::Trap(); }

inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

// CUDA's global min and max overloads.
#define TETRA_EMULATOR_MIN_MAX(T)                  \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
TETRA_EMULATOR_MIN_MAX(int)
TETRA_EMULATOR_MIN_MAX(unsigned)
TETRA_EMULATOR_MIN_MAX(long)
TETRA_EMULATOR_MIN_MAX(unsigned long)
TETRA_EMULATOR_MIN_MAX(long long)
TETRA_EMULATOR_MIN_MAX(unsigned long long)
#undef TETRA_EMULATOR_MIN_MAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

#endif  // TETRA_EMULATOR_INCLUDE_DEVICE_BUILTINS_H_
