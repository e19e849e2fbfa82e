#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::ProbeLoss;
using ::tetra::testing::RandomVector;

constexpr int64_t kRows = 4;
constexpr int64_t kDim = 12;
constexpr float kEps = 1e-5f;

struct Tolerances {
  double forward;  // fp32 output vs a double formula: a few ulps of O(1) values
  ::tetra::testing::GradCheckOptions grad;
};
// RMSNorm is smooth in x and linear in w; with h = 1e-2 the central-difference
// truncation error is ~h^2 ~ 1e-4 of the gradient, fp32 noise ~1e-5.
constexpr Tolerances kTol = {
    .forward = 2e-6, .grad = {.step = 1e-2, .rel_tol = 5e-3, .abs_tol = 5e-4, .max_checks = 1000}};

TEST(RmsNormTest, ForwardMatchesDoubleFormula) {
  const std::vector<float> x = RandomVector(kRows * kDim, 1, 3.0f);
  const std::vector<float> w = RandomVector(kDim, 2);
  std::vector<float> y(kRows * kDim), rstd(kRows);
  RmsNormForward(x.data(), w.data(), kRows, kDim, kEps, y.data(), rstd.data());
  for (int64_t r = 0; r < kRows; ++r) {
    double mean_sq = 0;
    for (int64_t j = 0; j < kDim; ++j) mean_sq += double{x[r * kDim + j]} * x[r * kDim + j];
    mean_sq /= kDim;
    const double expected_rstd = 1.0 / std::sqrt(mean_sq + kEps);
    EXPECT_NEAR(rstd[r], expected_rstd, kTol.forward * expected_rstd);
    for (int64_t j = 0; j < kDim; ++j) {
      EXPECT_NEAR(y[r * kDim + j], w[j] * x[r * kDim + j] * expected_rstd, kTol.forward)
          << "row " << r << " dim " << j;
    }
  }
}

TEST(RmsNormTest, BackwardMatchesFiniteDifferences) {
  std::vector<float> x = RandomVector(kRows * kDim, 3);
  std::vector<float> w = RandomVector(kDim, 4);
  const std::vector<float> probe = RandomVector(kRows * kDim, 5);
  auto loss = [&] {
    std::vector<float> y(kRows * kDim), rstd(kRows);
    RmsNormForward(x.data(), w.data(), kRows, kDim, kEps, y.data(), rstd.data());
    return ProbeLoss(y.data(), probe);
  };
  std::vector<float> y(kRows * kDim), rstd(kRows);
  RmsNormForward(x.data(), w.data(), kRows, kDim, kEps, y.data(), rstd.data());
  const std::vector<float> dw_before = RandomVector(kDim, 6);
  std::vector<float> dx(kRows * kDim);
  std::vector<float> dw = dw_before;
  RmsNormBackward(probe.data(), x.data(), w.data(), rstd.data(), kRows, kDim, dx.data(), dw.data());
  std::vector<float> dw_added(kDim);
  for (int64_t j = 0; j < kDim; ++j) dw_added[j] = dw[j] - dw_before[j];
  ExpectGradientMatches("dx", x.data(), kRows * kDim, dx.data(), loss, kTol.grad);
  ExpectGradientMatches("dw", w.data(), kDim, dw_added.data(), loss, kTol.grad);

  // dx may overwrite dy in place.
  std::vector<float> in_place = probe;
  std::vector<float> dw_in_place = dw_before;
  RmsNormBackward(in_place.data(), x.data(), w.data(), rstd.data(), kRows, kDim, in_place.data(),
                  dw_in_place.data());
  EXPECT_EQ(in_place, dx);
  EXPECT_EQ(dw_in_place, dw);
}

TEST(RmsNormTest, BackwardIsBitIdenticalAcrossRunsAndThreadCounts) {
  const int64_t rows = 601, dim = 56;  // above kMinParallelWork
  const std::vector<float> x = RandomVector(rows * dim, 7);
  const std::vector<float> w = RandomVector(dim, 8);
  const std::vector<float> dy = RandomVector(rows * dim, 9);
  std::vector<float> y(rows * dim), rstd(rows);
  RmsNormForward(x.data(), w.data(), rows, dim, kEps, y.data(), rstd.data());
  const int saved_threads = CpuThreads();
  std::vector<std::vector<float>> dws, dxs;
  for (int threads : {2, 2, 1, 3}) {
    SetCpuThreads(threads);
    std::vector<float> dx(rows * dim), dw(dim, 0.5f);
    RmsNormBackward(dy.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
    dxs.push_back(dx);
    dws.push_back(dw);
  }
  SetCpuThreads(saved_threads);
  for (size_t r = 1; r < dws.size(); ++r) {
    EXPECT_EQ(std::memcmp(dws[r].data(), dws[0].data(), dim * sizeof(float)), 0) << "run " << r;
    EXPECT_EQ(std::memcmp(dxs[r].data(), dxs[0].data(), rows * dim * sizeof(float)), 0)
        << "run " << r;
  }
}

// The fused forms against the separate ops they replace, through the op API
// on host tensors (where a bf16 run rounds what it stores): bit for bit, in
// fp32 and bf16, at a size that splits the rows over threads and one whose
// dim fits no vector width.
struct FusedShape {
  int64_t rows, dim;
};
constexpr FusedShape kFusedShapes[] = {{601, 56}, {5, 301}};

// N(0, scale^2) values rounded to `dtype`.
Tensor RandomTensor(const Shape& shape, uint64_t stream, DType dtype, float scale = 1.0f) {
  Tensor wide = Tensor::Empty(shape);
  const std::vector<float> values = RandomVector(wide.numel(), stream, scale);
  std::copy(values.begin(), values.end(), wide.f32());
  Tensor t = Tensor::Empty(shape, dtype);
  ops::Cast(wide, t);
  return t;
}

void ExpectSameBits(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << what << " differs";
}

class FusedRmsNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(FusedRmsNormTest, AddRmsNormIsAddThenRmsNorm) {
  const DType dtype = GetParam();
  for (const FusedShape& s : kFusedShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.dim);
    const Tensor x = RandomTensor({s.rows, s.dim}, 10, dtype, 3.0f);
    const Tensor delta = RandomTensor({s.rows, s.dim}, 11, dtype);
    const Tensor w = RandomTensor({s.dim}, 12, dtype);
    const Tensor sum = Tensor::Empty({s.rows, s.dim}, dtype);
    const Tensor y = Tensor::Empty({s.rows, s.dim}, dtype);
    const Tensor rstd = Tensor::Empty({s.rows});
    ops::AddRmsNorm(x, delta, w, kEps, sum, y, rstd);

    const Tensor want_sum = x.Clone(), want_y = Tensor::Empty({s.rows, s.dim}, dtype);
    const Tensor want_rstd = Tensor::Empty({s.rows});
    ops::Add(delta, want_sum);
    ops::RmsNorm(want_sum, w, kEps, want_y, want_rstd);
    ExpectSameBits(sum, want_sum, "sum");
    ExpectSameBits(y, want_y, "y");
    ExpectSameBits(rstd, want_rstd, "rstd");
  }
}

TEST_P(FusedRmsNormTest, BackwardAddingToDxIsBackwardThenAdd) {
  const DType dtype = GetParam();
  for (const FusedShape& s : kFusedShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.dim);
    const Tensor x = RandomTensor({s.rows, s.dim}, 20, dtype, 3.0f);
    const Tensor w = RandomTensor({s.dim}, 21, dtype);
    const Tensor dy = RandomTensor({s.rows, s.dim}, 22, dtype);
    const Tensor residual_grad = RandomTensor({s.rows, s.dim}, 23, dtype);
    const Tensor y = Tensor::Empty({s.rows, s.dim}, dtype), rstd = Tensor::Empty({s.rows});
    ops::RmsNorm(x, w, kEps, y, rstd);
    const Tensor dw_before = RandomTensor({s.dim}, 24, DType::kF32);

    const Tensor want_dx = Tensor::Empty({s.rows, s.dim}, dtype), want_dw = dw_before.Clone();
    ops::RmsNormBackward(dy, x, w, rstd, want_dx, want_dw);
    ops::Add(residual_grad, want_dx);

    const Tensor dx = Tensor::Empty({s.rows, s.dim}, dtype), dw = dw_before.Clone();
    ops::RmsNormBackward(dy, x, w, rstd, dx, dw, /*dx_add=*/residual_grad);
    ExpectSameBits(dx, want_dx, "dx = dx_add + gradient");
    ExpectSameBits(dw, want_dw, "dw");

    // dx_add may be dx itself (dx +=), and dx may be dy.
    const Tensor accumulated = residual_grad.Clone(), dw_accumulated = dw_before.Clone();
    ops::RmsNormBackward(dy, x, w, rstd, accumulated, dw_accumulated, /*dx_add=*/accumulated);
    ExpectSameBits(accumulated, want_dx, "dx += gradient");
    const Tensor over_dy = dy.Clone(), dw_over_dy = dw_before.Clone();
    ops::RmsNormBackward(over_dy, x, w, rstd, over_dy, dw_over_dy, /*dx_add=*/residual_grad);
    ExpectSameBits(over_dy, want_dx, "dx written over dy");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedRmsNormTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tetra::cpu
