#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
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

}  // namespace
}  // namespace tetra::cpu
