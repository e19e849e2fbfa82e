// Elementwise math that vectorises: glibc's expf is not vectorised without
// -ffast-math, and std::sqrt keeps a scalar errno path unless -fno-math-errno,
// yet softmax, SiLU and AdamW call them once per element.
#ifndef TETRA_KERNELS_CPU_VEC_MATH_H_
#define TETRA_KERNELS_CPU_VEC_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tetra::cpu {

// exp(x) in fp32 within ~1.5 ulp (Cephes expf: Cody-Waite reduction by ln 2,
// degree-6 polynomial, exponent built from bits). 0 below the smallest normal
// result, +inf above the largest finite one, NaN stays NaN. Branch-free, so
// loops calling it vectorise.
inline float VecExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;     // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMin = -87.3365478515625f;     // ~ln(FLT_MIN)
  constexpr float kMax = 88.72283172607421875f;  // largest float with finite exp
  const float xc = x < kMin ? kMin : (x > kMax ? kMax : x);
  const float t = xc * kLog2e + kRoundMagic;
  const float k = t - kRoundMagic;                 // round(x / ln 2)
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;  // |r| <= ln(2) / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;  // exp(r)
  // 2^k from the exponent bits; k = 128 (the top of the range) as 2^127 * 2.
  const int32_t ki = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRoundMagic);
  const int32_t kc = ki > 127 ? 127 : ki;
  float y = p * std::bit_cast<float>((kc + 127) << 23);
  y = ki > 127 ? y * 2.0f : y;
  return x < kMin ? 0.0f : (x > kMax ? std::numeric_limits<float>::infinity() : y);
}

// x (n) = sqrt(x), correctly rounded as std::sqrt (x >= 0 expected).
inline void SqrtInPlace(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    // maskz over all lanes is _mm512_sqrt_ps minus the _mm512_undefined_ps GCC 12 warns on.
    _mm512_storeu_ps(x + i, _mm512_maskz_sqrt_ps(0xffff, _mm512_loadu_ps(x + i)));
  }
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_VEC_MATH_H_
