// cuBLASLt linear layers against the CPU (OpenBLAS) ones on the same inputs:
// forward, backward with accumulated dw, written and accumulated dx; fp32,
// and bf16 inputs with fp32 or bf16 outputs.
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// Inputs are identical (bf16 ones rounded for both sides) and both sides sum
// k <= 48 products of O(1) values in fp32, in different orders: ~k * 6e-8 *
// |terms|, under 1e-5; 1e-4 leaves margin.
constexpr Tolerance kFp32Tol{1e-4, 1e-4};
// A bf16 output adds one rounding of at most 2^-9 relative.
constexpr Tolerance kBf16OutTol{1e-4, 4e-3};

constexpr int64_t kRows = 37, kIn = 48, kOut = 29;  // odd sizes: no tile fits exactly

TEST(GemmGpuTest, LinearMatchesCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = testing::RoundTo(testing::HostRandom({kRows, kIn}, 1), dtype);
    const Tensor w = testing::RoundTo(testing::HostRandom({kOut, kIn}, 2), dtype);
    Tensor want = Tensor::Empty({kRows, kOut});
    ops::Linear(x, w, want);
    for (DType out_dtype : {DType::kF32, dtype}) {
      const Tensor y = Tensor::Empty({kRows, kOut}, out_dtype, DeviceType::kCUDA);
      ops::Linear(testing::ToDevice(x, dtype), testing::ToDevice(w, dtype), y);
      testing::ExpectClose("y", testing::ToHostF32(y), want,
                           out_dtype == DType::kF32 ? kFp32Tol : kBf16OutTol);
    }
  }
}

TEST(GemmGpuTest, LinearBackwardMatchesCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool accumulate_dx : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (accumulate_dx ? " accumulate" : ""));
      const Tensor x = testing::RoundTo(testing::HostRandom({kRows, kIn}, 1), dtype);
      const Tensor w = testing::RoundTo(testing::HostRandom({kOut, kIn}, 2), dtype);
      const Tensor dy = testing::RoundTo(testing::HostRandom({kRows, kOut}, 3), dtype);
      const Tensor dx0 = testing::RoundTo(testing::HostRandom({kRows, kIn}, 4), dtype);
      const Tensor dw0 = testing::HostRandom({kOut, kIn}, 5);  // earlier micro-batches
      const Tensor dx = dx0.Clone(), dw = dw0.Clone();
      ops::LinearBackward(dy, x, w, dx, dw, accumulate_dx);
      const Tensor dx_gpu = testing::ToDevice(dx0, dtype);
      const Tensor dw_gpu = testing::ToDevice(dw0);  // fp32 parameter gradient
      ops::LinearBackward(testing::ToDevice(dy, dtype), testing::ToDevice(x, dtype),
                          testing::ToDevice(w, dtype), dx_gpu, dw_gpu, accumulate_dx);
      testing::ExpectClose("dx", testing::ToHostF32(dx_gpu), dx,
                           dtype == DType::kF32 ? kFp32Tol : kBf16OutTol);
      testing::ExpectClose("dw", testing::ToHostF32(dw_gpu), dw, kFp32Tol);
    }
  }
}

}  // namespace
}  // namespace tetra
