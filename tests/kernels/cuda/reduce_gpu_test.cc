// Sum of squares, scale, add and casts on the device against the CPU.
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// Sum of squares: both sides sum in fp64, in different orders: ~1e-15
// relative; 1e-12 leaves margin.
constexpr double kSumRelTol = 1e-12;
// Scale, add and casts are one fp32 operation and at most one rounding on
// both sides: exact.
constexpr Tolerance kExact{0.0, 0.0};

TEST(ReduceGpuTest, SumOfSquaresMatchesCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = testing::RoundTo(testing::HostRandom({100003}, 1), dtype);
    const double want = ops::SumOfSquares(x);
    EXPECT_NEAR(ops::SumOfSquares(testing::ToDevice(x, dtype)), want, kSumRelTol * want);
  }
}

TEST(ReduceGpuTest, ScaleAddAndCastMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = testing::RoundTo(testing::HostRandom({5000}, 1), dtype);
    const Tensor y = testing::RoundTo(testing::HostRandom({5000}, 2), dtype);
    const Tensor x_d = testing::ToDevice(x, dtype), y_d = testing::ToDevice(y, dtype);
    ops::Scale(x, 0.37f);
    ops::Scale(x_d, 0.37f);
    testing::ExpectClose("scale", testing::ToHostF32(x_d), testing::RoundTo(x, dtype), kExact);
    const Tensor x_r = testing::RoundTo(x, dtype);
    ops::Add(x_r, y);
    ops::Add(x_d, y_d);
    testing::ExpectClose("add", testing::ToHostF32(y_d), testing::RoundTo(y, dtype), kExact);
  }
  const Tensor x = testing::HostRandom({4097}, 3);
  const Tensor narrow_d = Tensor::Empty({4097}, DType::kBF16, DeviceType::kCUDA);
  ops::Cast(testing::ToDevice(x), narrow_d);  // rounded on the device
  testing::ExpectClose("fp32 -> bf16", testing::ToHostF32(narrow_d),
                       testing::RoundTo(x, DType::kBF16), kExact);
  const Tensor wide_d = Tensor::Empty({4097}, DType::kF32, DeviceType::kCUDA);
  ops::Cast(narrow_d, wide_d);
  testing::ExpectClose("bf16 -> fp32", testing::ToHostF32(wide_d),
                       testing::RoundTo(x, DType::kBF16), kExact);
}

}  // namespace
}  // namespace tetra
