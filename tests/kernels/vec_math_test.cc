#include "kernels/cpu/vec_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tetra::cpu {
namespace {

// Cephes expf's bound: ~1.5 ulp, i.e. 1.5 * 2^-23 relative.
constexpr double kExpRelTol = 1.5 * 0x1p-23;

TEST(VecMathTest, ExpIsWithinUlpsOfDoubleExpOverTheNormalRange) {
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.0f; x < 88.7f; x += 0.00731f) {
    const double expected = std::exp(static_cast<double>(x));
    const double error = std::fabs(VecExp(x) - expected) / expected;
    if (error > worst) worst = error, worst_x = x;
  }
  EXPECT_LE(worst, kExpRelTol) << "at x = " << worst_x;
  EXPECT_EQ(VecExp(0.0f), 1.0f);
}

TEST(VecMathTest, ExpSaturatesLikeExpf) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(VecExp(-1000.0f), 0.0f);
  EXPECT_EQ(VecExp(-inf), 0.0f);
  EXPECT_EQ(VecExp(89.0f), inf);
  EXPECT_EQ(VecExp(inf), inf);
  EXPECT_TRUE(std::isnan(VecExp(std::numeric_limits<float>::quiet_NaN())));
  // Just below the overflow threshold, exp is still finite (the 2^128 case).
  const double near_max = std::exp(static_cast<double>(88.72f));
  EXPECT_NEAR(VecExp(88.72f), near_max, kExpRelTol * near_max);
}

TEST(VecMathTest, SqrtInPlaceIsCorrectlyRounded) {
  std::vector<float> x(37);  // two 16-lane blocks and a tail
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.37f * i * i + 1e-3f * i;
  std::vector<float> roots = x;
  SqrtInPlace(roots.data(), roots.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(roots[i], std::sqrt(x[i])) << i;
}

}  // namespace
}  // namespace tetra::cpu
