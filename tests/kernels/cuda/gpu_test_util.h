// Shared pieces of the CUDA-against-CPU kernel tests (`gpu` label): skipping
// where there is no device, moving random inputs to the device in fp32 or bf16,
// and comparing device results with the CPU kernel's on the same inputs (for
// bf16, the CPU sees the bf16-rounded values, so only the kernel's own
// arithmetic and output rounding differ).
#ifndef TETRA_TESTS_KERNELS_CUDA_GPU_TEST_UTIL_H_
#define TETRA_TESTS_KERNELS_CUDA_GPU_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/device.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

// Skips the test, with the runtime's reason, where no CUDA device is usable.
#define TETRA_SKIP_WITHOUT_GPU()                                          \
  do {                                                                    \
    std::string tetra_no_gpu_reason;                                      \
    if (::tetra::cuda::DeviceCount(&tetra_no_gpu_reason) == 0) {          \
      GTEST_SKIP() << "no CUDA device: " << tetra_no_gpu_reason;          \
    }                                                                     \
  } while (0)

namespace tetra::testing {

// |got - want| <= abs + rel * |want|, elementwise.
struct Tolerance {
  double abs, rel;
};

// Host fp32 tensor of N(0, scale^2) values from (stream).
inline Tensor HostRandom(const Shape& shape, uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::Empty(shape);
  const auto values = RandomVector(t.numel(), stream, scale);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

// The fp32 values a `dtype` tensor holds after rounding host (fp32) into it.
inline Tensor RoundTo(const Tensor& host, DType dtype) {
  if (dtype == DType::kF32) return host.Clone();
  Tensor narrow = Tensor::Empty(host.shape(), dtype);
  ops::Cast(host, narrow);
  Tensor back = Tensor::Empty(host.shape());
  ops::Cast(narrow, back);
  return back;
}

// A device tensor of `dtype` holding host's values (rounded).
inline Tensor ToDevice(const Tensor& host, DType dtype = DType::kF32) {
  Tensor narrow = Tensor::Empty(host.shape(), dtype);
  ops::Cast(host, narrow);
  Tensor device = Tensor::Empty(host.shape(), dtype, DeviceType::kCUDA);
  device.CopyFrom(narrow);
  return device;
}

// The host fp32 values of a device tensor (fp32 or bf16).
inline Tensor ToHostF32(const Tensor& device) {
  Tensor host = Tensor::Empty(device.shape(), device.dtype());
  host.CopyFrom(device);
  Tensor f32 = Tensor::Empty(device.shape());
  ops::Cast(host, f32);
  return f32;
}

inline void ExpectClose(const std::string& what, const Tensor& got, const Tensor& want,
                        const Tolerance& tol) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.f32()[i], w = want.f32()[i];
    const double excess = std::fabs(g - w) - (tol.abs + tol.rel * std::fabs(w));
    if (!(excess <= 0)) {  // NaN counts as bad
      ++bad;
      if (worst < 0 || !(excess <= worst_excess)) worst = i, worst_excess = excess;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.numel()
                    << " elements out of tolerance; worst at " << worst << ": got "
                    << (worst >= 0 ? got.f32()[worst] : 0.0f) << " want "
                    << (worst >= 0 ? want.f32()[worst] : 0.0f);
}

inline const char* Name(DType dtype) { return DTypeName(dtype); }

}  // namespace tetra::testing

#endif  // TETRA_TESTS_KERNELS_CUDA_GPU_TEST_UTIL_H_
