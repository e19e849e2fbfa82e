// 128-bit loads and stores for the elementwise kernels: a pass over n
// elements splits into a scalar head (up to the first 16-byte boundary),
// whole 16-byte vectors (4 fp32 or 8 bf16) and a scalar tail, and each
// element goes through the same fp32 code and the same FromFloat rounding
// whichever part holds it, so the vector path computes what the scalar one
// does. Tensors may be slices at any element offset: a split pass uses
// vectors only when every pointer of it sits at the same offset modulo 16
// bytes (else it is all scalar); a kernel over rows (RoPE, the embedding)
// uses them only when every row starts on a 16-byte boundary.
#ifndef TETRA_KERNELS_CUDA_VECTOR_ACCESS_CUH_
#define TETRA_KERNELS_CUDA_VECTOR_ACCESS_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {

constexpr int kVectorBytes = 16;

// Elements of T in one 16-byte vector.
template <typename T>
constexpr int kVectorWidth = kVectorBytes / static_cast<int>(sizeof(T));

// How many elements one call handles: 1 or a whole number of vectors.
template <int W>
using Width = std::integral_constant<int, W>;

__host__ __device__ inline bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0;
}

// True when a and b sit at the same offset within 16 bytes (one split fits both).
__host__ __device__ inline bool SameAlignment(const void* a, const void* b) {
  return (reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) % kVectorBytes == 0;
}

// A pass over elements [0, n) of p: [0, head) scalar, then `vectors` whole
// vectors from p + head (16-byte aligned), then scalar to n.
struct VectorSplit {
  int64_t n, head, vectors;
};

// With `vectorize` false every element is in the head.
template <typename T>
__host__ __device__ inline VectorSplit SplitForVectors(const T* p, int64_t n, bool vectorize) {
  if (!vectorize) return {n, n, 0};
  // Bytes to the next boundary, a whole number of elements (p is T-aligned).
  const int64_t to_boundary =
      (kVectorBytes - reinterpret_cast<uintptr_t>(p) % kVectorBytes) % kVectorBytes / sizeof(T);
  const int64_t head = to_boundary < n ? to_boundary : n;
  return {n, head, (n - head) / kVectorWidth<T>};
}

// f(i, Width<1>{}) for each scalar element and f(i, Width<W>{}) for each
// vector starting at element i, W = kVectorWidth<T>; thread `first` of a
// group of `stride` threads takes every stride-th item of each part.
template <typename T, typename F>
__device__ __forceinline__ void ForEachPart(const VectorSplit& s, int64_t first, int64_t stride,
                                            F&& f) {
  constexpr int kW = kVectorWidth<T>;
  for (int64_t i = first; i < s.head; i += stride) f(i, Width<1>{});
  for (int64_t v = first; v < s.vectors; v += stride) f(s.head + v * kW, Width<kW>{});
  for (int64_t i = s.head + s.vectors * kW + first; i < s.n; i += stride) f(i, Width<1>{});
}

// The fp32 values of the T elements in one 32-bit word of a vector (the
// lower address in the low bits), and the word of T elements holding `in`
// rounded by FromFloat, as a scalar store rounds.
template <typename T>
__device__ __forceinline__ void UnpackWord(uint32_t word, float* out) {
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(word);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "fp32 or bf16");
    out[0] = ToFloat(__ushort_as_bfloat16(static_cast<unsigned short>(word & 0xffffu)));
    out[1] = ToFloat(__ushort_as_bfloat16(static_cast<unsigned short>(word >> 16)));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t PackWord(const float* in) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(in[0]);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "fp32 or bf16");
    return static_cast<uint32_t>(__bfloat16_as_ushort(FromFloat<T>(in[0]))) |
           static_cast<uint32_t>(__bfloat16_as_ushort(FromFloat<T>(in[1]))) << 16;
  }
}

// One 16-byte load from global memory (p 16-byte aligned).
__device__ __forceinline__ uint4 LoadVector(const void* p) {
#if TETRA_EMULATED_GPU
  emulator::CheckVectorAccess(p, "load");
#endif
  return *reinterpret_cast<const uint4*>(p);
}

// One 16-byte store to global memory (p 16-byte aligned). Inline PTX: nvcc
// splits a plain uint4 store into four 4-byte ones in some kernels (the
// cross-entropy gradient); "memory" orders it as a plain store is ordered.
__device__ __forceinline__ void StoreVector(void* p, uint4 v) {
#if TETRA_EMULATED_GPU
  emulator::CheckVectorAccess(p, "store");
  *static_cast<uint4*>(p) = v;
#else
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#endif
}

// W elements at p as fp32: one scalar, or W / kVectorWidth<T> 16-byte loads
// (p then 16-byte aligned).
template <int W, typename T>
__device__ __forceinline__ void LoadFloats(const T* p, float (&out)[W]) {
  if constexpr (W == 1) {
    out[0] = ToFloat(*p);
  } else {
    constexpr int kW = kVectorWidth<T>, kPerWord = 4 / sizeof(T);
    static_assert(W % kW == 0, "a whole number of vectors");
#pragma unroll
    for (int c = 0; c < W / kW; ++c) {
      const uint4 raw = LoadVector(p + c * kW);
      float* o = out + c * kW;
      UnpackWord<T>(raw.x, o);
      UnpackWord<T>(raw.y, o + kPerWord);
      UnpackWord<T>(raw.z, o + 2 * kPerWord);
      UnpackWord<T>(raw.w, o + 3 * kPerWord);
    }
  }
}

// The store of LoadFloats.
template <int W, typename T>
__device__ __forceinline__ void StoreFloats(T* p, const float (&in)[W]) {
  if constexpr (W == 1) {
    *p = FromFloat<T>(in[0]);
  } else {
    constexpr int kW = kVectorWidth<T>, kPerWord = 4 / sizeof(T);
    static_assert(W % kW == 0, "a whole number of vectors");
#pragma unroll
    for (int c = 0; c < W / kW; ++c) {
      const float* i = in + c * kW;
      StoreVector(p + c * kW,
                  make_uint4(PackWord<T>(i), PackWord<T>(i + kPerWord),
                             PackWord<T>(i + 2 * kPerWord), PackWord<T>(i + 3 * kPerWord)));
    }
  }
}

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_VECTOR_ACCESS_CUH_
