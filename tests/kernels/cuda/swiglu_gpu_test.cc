// SwiGLU forward and backward on the device against the CPU kernel.
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// The CPU's exp is a ~1.5 ulp polynomial, CUDA's expf ~2 ulp; through
// g / (1 + exp(-g)) and its derivative that stays within a few ulp.
constexpr Tolerance kFp32Tol{1e-6, 2e-6};
constexpr Tolerance kBf16Tol{1e-6, 4e-3};  // plus one bf16 rounding

TEST(SwigluGpuTest, ForwardAndBackwardMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const Shape shape = {13, 57};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tolerance tol = dtype == DType::kF32 ? kFp32Tol : kBf16Tol;
    const Tensor gate = testing::RoundTo(testing::HostRandom(shape, 1, 3.0f), dtype);
    const Tensor up = testing::RoundTo(testing::HostRandom(shape, 2), dtype);
    const Tensor dout = testing::RoundTo(testing::HostRandom(shape, 3), dtype);
    Tensor out = Tensor::Empty(shape), dgate = Tensor::Empty(shape), dup = Tensor::Empty(shape);
    ops::Swiglu(gate, up, out);
    ops::SwigluBackward(dout, gate, up, dgate, dup);

    const Tensor gate_d = testing::ToDevice(gate, dtype), up_d = testing::ToDevice(up, dtype);
    const Tensor out_d = Tensor::Empty(shape, dtype, DeviceType::kCUDA);
    ops::Swiglu(gate_d, up_d, out_d);
    testing::ExpectClose("out", testing::ToHostF32(out_d), out, tol);
    const Tensor dgate_d = Tensor::Empty(shape, dtype, DeviceType::kCUDA);
    const Tensor dup_d = Tensor::Empty(shape, dtype, DeviceType::kCUDA);
    ops::SwigluBackward(testing::ToDevice(dout, dtype), gate_d, up_d, dgate_d, dup_d);
    testing::ExpectClose("dgate", testing::ToHostF32(dgate_d), dgate, tol);
    testing::ExpectClose("dup", testing::ToHostF32(dup_d), dup, tol);
  }
}

}  // namespace
}  // namespace tetra
