// The emulated device's bfloat16: CUDA's __nv_bfloat16 storage type and the
// conversions tetra's kernels use, rounding to nearest even as the device does.
#ifndef TETRA_EMULATOR_INCLUDE_CUDA_BF16_H_
#define TETRA_EMULATOR_INCLUDE_CUDA_BF16_H_

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return {static_cast<unsigned short>((bits >> 16) | 0x40u)};
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round half to even
  return {static_cast<unsigned short>(bits >> 16)};
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }

#endif  // TETRA_EMULATOR_INCLUDE_CUDA_BF16_H_
