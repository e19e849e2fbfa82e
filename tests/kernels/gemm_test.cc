#include "kernels/cpu/gemm.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::ProbeLoss;
using ::tetra::testing::RandomVector;

// fp32 GEMM against a double triple loop: each output sums k products of N(0,1)
// numbers, so its rounding error is a few ulps of sqrt(k) ~ 1e-6 at these sizes.
constexpr double kGemmAbsTol = 1e-5;
// Linear layers are linear in x and w, so central differences have no
// truncation error; what is left is fp32 rounding of the probed loss.
constexpr ::tetra::testing::GradCheckOptions kLinearGradOptions = {
    .step = 1e-2, .rel_tol = 1e-3, .abs_tol = 1e-3, .max_checks = 64};

// Element (r, c) of op(X) where X is stored (rows, cols) untransposed, or
// (cols, rows) when trans.
double OpAt(const std::vector<float>& x, bool trans, int64_t r, int64_t c, int64_t rows,
            int64_t cols) {
  return trans ? x[c * rows + r] : x[r * cols + c];
}

TEST(GemmTest, AllTransposeCombinationsMatchTripleLoop) {
  const int64_t m = 5, n = 7, k = 3;
  const float alpha = 0.7f, beta = -0.3f;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << trans_a << " trans_b=" << trans_b);
      const std::vector<float> a = RandomVector(m * k, 1);
      const std::vector<float> b = RandomVector(k * n, 2);
      std::vector<float> c = RandomVector(m * n, 3);
      const std::vector<float> c_in = c;
      Gemm(trans_a, trans_b, m, n, k, alpha, a.data(), b.data(), beta, c.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            sum += OpAt(a, trans_a, i, p, m, k) * OpAt(b, trans_b, p, j, k, n);
          }
          EXPECT_NEAR(c[i * n + j], alpha * sum + beta * c_in[i * n + j], kGemmAbsTol)
              << "at (" << i << ", " << j << ")";
        }
      }
    }
  }
}

TEST(GemmTest, ZeroBetaOverwritesGarbage) {
  const int64_t m = 4, n = 3, k = 2;
  const std::vector<float> a = RandomVector(m * k, 4);
  const std::vector<float> b = RandomVector(k * n, 5);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  Gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  for (float value : c) EXPECT_FALSE(std::isnan(value));
}

TEST(GemmTest, EmptyInnerDimensionScalesC) {
  std::vector<float> c = {1.0f, -2.0f, 4.0f, 8.0f};
  Gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, c.data());
  EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 2.0f, 4.0f}));
}

TEST(LinearTest, ForwardIsXTimesWTransposed) {
  const int64_t rows = 3, in = 5, out = 4;
  const std::vector<float> x = RandomVector(rows * in, 6);
  const std::vector<float> w = RandomVector(out * in, 7);
  std::vector<float> y(rows * out);
  LinearForward(x.data(), w.data(), rows, in, out, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += double{x[r * in + i]} * w[o * in + i];
      EXPECT_NEAR(y[r * out + o], sum, kGemmAbsTol);
    }
  }
}

TEST(LinearTest, BackwardMatchesFiniteDifferencesOverwritingOrAccumulatingDx) {
  const int64_t rows = 4, in = 6, out = 5;
  std::vector<float> x = RandomVector(rows * in, 8);
  std::vector<float> w = RandomVector(out * in, 9);
  const std::vector<float> probe = RandomVector(rows * out, 10);
  auto loss = [&] {
    std::vector<float> y(rows * out);
    LinearForward(x.data(), w.data(), rows, in, out, y.data());
    return ProbeLoss(y.data(), probe);
  };
  // dw always accumulates: start from an earlier micro-batch's gradient.
  const std::vector<float> dw_before = RandomVector(out * in, 11);
  for (bool accumulate_dx : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "accumulate_dx=" << accumulate_dx);
    // Overwriting must ignore what dx held, even NaN; accumulating adds onto it.
    const std::vector<float> dx_before =
        accumulate_dx ? RandomVector(rows * in, 12)
                      : std::vector<float>(rows * in, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> dx = dx_before;
    std::vector<float> dw = dw_before;
    LinearBackward(probe.data(), x.data(), w.data(), rows, in, out, out, dx.data(), dw.data(),
                   accumulate_dx);
    std::vector<float> dx_added = dx;
    if (accumulate_dx) {
      for (int64_t i = 0; i < rows * in; ++i) dx_added[i] -= dx_before[i];
    }
    std::vector<float> dw_added(out * in);
    for (int64_t i = 0; i < out * in; ++i) dw_added[i] = dw[i] - dw_before[i];
    ExpectGradientMatches("dx", x.data(), rows * in, dx_added.data(), loss, kLinearGradOptions);
    ExpectGradientMatches("dw", w.data(), out * in, dw_added.data(), loss, kLinearGradOptions);

    // dx may be skipped (first layer); dw is then the same.
    std::vector<float> dw_only = dw_before;
    LinearBackward(probe.data(), x.data(), w.data(), rows, in, out, out, nullptr, dw_only.data(),
                   accumulate_dx);
    EXPECT_EQ(dw_only, dw);
  }
}

TEST(LinearTest, AccumulatedDxMatchesDoubleReference) {
  const int64_t rows = 3, in = 4, out = 6;
  const std::vector<float> x = RandomVector(rows * in, 13);
  const std::vector<float> w = RandomVector(out * in, 14);
  const std::vector<float> dy = RandomVector(rows * out, 15);
  const std::vector<float> dx_before = RandomVector(rows * in, 16);
  std::vector<float> dx = dx_before;
  std::vector<float> dw(out * in, 0.0f);
  LinearBackward(dy.data(), x.data(), w.data(), rows, in, out, out, dx.data(), dw.data(),
                 /*accumulate_dx=*/true);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      double sum = dx_before[r * in + i];
      for (int64_t o = 0; o < out; ++o) sum += double{dy[r * out + o]} * w[o * in + i];
      EXPECT_NEAR(dx[r * in + i], sum, kGemmAbsTol) << "at (" << r << ", " << i << ")";
    }
  }
}

// A padded LM head: dy rows 8 floats apart of which the first 3 are real;
// the backward over them gives the unpadded layer's bits (a leading
// dimension changes no sum), and dw's padding rows are left alone.
TEST(LinearTest, PaddedOutputsTakeNoPart) {
  const int64_t rows = 7, in = 5, out = 3, padded = 8;
  const std::vector<float> x = RandomVector(rows * in, 17);
  const std::vector<float> w_padded = RandomVector(padded * in, 18);
  const std::vector<float> dy_padded = RandomVector(rows * padded, 19);
  std::vector<float> dy(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(dy_padded.begin() + r * padded, dy_padded.begin() + r * padded + out,
              dy.begin() + r * out);
  }
  std::vector<float> dx(rows * in), dw(out * in, 0.0f);
  LinearBackward(dy.data(), x.data(), w_padded.data(), rows, in, out, out, dx.data(), dw.data(),
                 false);
  std::vector<float> dx_padded(rows * in), dw_padded(padded * in, 7.0f);
  std::fill(dw_padded.begin(), dw_padded.begin() + out * in, 0.0f);
  LinearBackward(dy_padded.data(), x.data(), w_padded.data(), rows, in, out, padded,
                 dx_padded.data(), dw_padded.data(), false);
  EXPECT_EQ(dx_padded, dx);
  EXPECT_EQ(std::vector<float>(dw_padded.begin(), dw_padded.begin() + out * in), dw);
  for (int64_t i = out * in; i < padded * in; ++i) EXPECT_EQ(dw_padded[i], 7.0f) << i;
}

}  // namespace
}  // namespace tetra::cpu
