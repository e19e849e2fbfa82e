// The emulated device's fp16: CUDA's __half storage type and its
// conversions, rounding to nearest even as the device does (the emulated
// cuBLASLt and NCCL read and write fp16 with them).
#ifndef TETRA_EMULATOR_INCLUDE_CUDA_FP16_H_
#define TETRA_EMULATOR_INCLUDE_CUDA_FP16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

struct __half {
  unsigned short __x;
};

inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.__x & 0x8000u) << 16;
  const uint32_t exponent = (h.__x >> 10) & 0x1fu, mantissa = h.__x & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)
                                         : sign | ((exponent + 112) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline __half __float2half_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const auto sign = static_cast<unsigned short>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<unsigned short>(sign | 0x7e00u)};  // NaN
  // From 65520 (halfway between fp16's largest, 65504, and 2^16) up: infinity.
  if (magnitude >= 0x477ff000u) return {static_cast<unsigned short>(sign | 0x7c00u)};
  if (magnitude < 0x38800000u) {  // below the smallest normal: in units of 2^-24, to nearest even
    return {static_cast<unsigned short>(
        sign | static_cast<unsigned short>(std::nearbyint(std::fabs(f) * 0x1p24f)))};
  }
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);  // round half to even
  return {static_cast<unsigned short>(sign | ((magnitude - 0x38000000u) >> 13))};
}

inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short x) { return {x}; }

#endif  // TETRA_EMULATOR_INCLUDE_CUDA_FP16_H_
