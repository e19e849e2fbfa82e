// Fused RMSNorm forward and backward on the device against the CPU kernel on
// the same inputs, fp32 and bf16 activations (fp32 statistics and dw).
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// fp32: the CPU sums squares in double, the GPU in fp32 over <= 300 terms:
// rstd differs by ~1e-6 relative. dw sums 45 rows in a different order.
constexpr Tolerance kFp32Tol{1e-5, 1e-5};
// bf16 outputs (y, dx): one rounding, at most 2^-9 relative, on top.
constexpr Tolerance kBf16OutTol{1e-5, 4e-3};

constexpr int64_t kRows = 45, kDim = 300;  // dim not a multiple of the block
constexpr float kEps = 1e-5f;

TEST(RmsNormGpuTest, ForwardAndBackwardMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tolerance out_tol = dtype == DType::kF32 ? kFp32Tol : kBf16OutTol;
    const Tensor x = testing::RoundTo(testing::HostRandom({kRows, kDim}, 1, 3.0f), dtype);
    const Tensor w = testing::RoundTo(testing::HostRandom({kDim}, 2), dtype);
    const Tensor dy = testing::RoundTo(testing::HostRandom({kRows, kDim}, 3), dtype);
    Tensor y = Tensor::Empty({kRows, kDim}), rstd = Tensor::Empty({kRows});
    ops::RmsNorm(x, w, kEps, y, rstd);
    const Tensor dw0 = testing::HostRandom({kDim}, 4);
    Tensor dx = Tensor::Empty({kRows, kDim}), dw = dw0.Clone();
    ops::RmsNormBackward(dy, x, w, rstd, dx, dw);

    const Tensor x_d = testing::ToDevice(x, dtype), w_d = testing::ToDevice(w, dtype);
    const Tensor y_d = Tensor::Empty({kRows, kDim}, dtype, DeviceType::kCUDA);
    const Tensor rstd_d = Tensor::Empty({kRows}, DType::kF32, DeviceType::kCUDA);
    ops::RmsNorm(x_d, w_d, kEps, y_d, rstd_d);
    testing::ExpectClose("y", testing::ToHostF32(y_d), y, out_tol);
    testing::ExpectClose("rstd", testing::ToHostF32(rstd_d), rstd, kFp32Tol);
    // dx written over dy, as the layers do.
    const Tensor dy_d = testing::ToDevice(dy, dtype), dw_d = testing::ToDevice(dw0);
    ops::RmsNormBackward(dy_d, x_d, w_d, testing::ToDevice(rstd), dy_d, dw_d);
    testing::ExpectClose("dx", testing::ToHostF32(dy_d), dx, out_tol);
    testing::ExpectClose("dw", testing::ToHostF32(dw_d), dw, kFp32Tol);
  }
}

}  // namespace
}  // namespace tetra
