// Fused vocabulary cross-entropy (loss and in-place gradient) on the device
// against the CPU kernel.
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// Loss: the CPU sums exps and rows in double, the GPU exps in fp32 (2 ulp)
// and rows' fp32 losses in double: ~1e-6 relative.
constexpr double kLossRelTol = 1e-5;
// dlogits = scale * softmax (~1e-3 here): fp32 exp and sum, a few ulp.
constexpr Tolerance kFp32Tol{1e-8, 1e-5};
constexpr Tolerance kBf16Tol{1e-8, 4e-3};  // plus one bf16 rounding

constexpr int64_t kRows = 23, kVocab = 1000;

TEST(CrossEntropyGpuTest, LossAndGradientMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  Tensor targets = Tensor::Empty({kRows}, DType::kI32);
  for (int64_t r = 0; r < kRows; ++r) targets.data<int32_t>()[r] = static_cast<int32_t>(r * 41 % kVocab);
  Tensor targets_d = Tensor::Empty({kRows}, DType::kI32, DeviceType::kCUDA);
  targets_d.CopyFrom(targets);
  const float grad_scale = 1.0f / 64;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor logits = testing::RoundTo(testing::HostRandom({kRows, kVocab}, 1, 3.0f), dtype);
    const Tensor dlogits = Tensor::Empty({kRows, kVocab});
    const double loss = ops::CrossEntropy(logits, targets, grad_scale, dlogits);
    const double loss_only = ops::CrossEntropy(logits, targets, grad_scale, Tensor());

    const Tensor logits_d = testing::ToDevice(logits, dtype);
    const double loss_d_only = ops::CrossEntropy(logits_d, targets_d, grad_scale, Tensor());
    const double loss_d = ops::CrossEntropy(logits_d, targets_d, grad_scale, logits_d);  // in place
    EXPECT_NEAR(loss_d, loss, kLossRelTol * std::fabs(loss));
    EXPECT_NEAR(loss_d_only, loss_only, kLossRelTol * std::fabs(loss));
    testing::ExpectClose("dlogits", testing::ToHostF32(logits_d), dlogits,
                         dtype == DType::kF32 ? kFp32Tol : kBf16Tol);
  }
}

}  // namespace
}  // namespace tetra
