#include "kernels/cpu/reduce.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::RandomVector;

TEST(ReduceTest, SumOfSquaresIsExactOnIntegersAndThreadCountIndependent) {
  // Integer-valued squares sum exactly in double, whatever the order.
  const int64_t n = 100003;  // several blocks and a ragged tail
  std::vector<float> x(n);
  double expected = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 41) - 20.0f;
    expected += static_cast<double>(x[i]) * x[i];
  }
  EXPECT_EQ(SumOfSquares(x.data(), n), expected);
  EXPECT_EQ(SumOfSquares(x.data(), 0), 0.0);

  const std::vector<float> noise = RandomVector(n, 1);
  const int saved_threads = CpuThreads();
  SetCpuThreads(1);
  const double one_thread = SumOfSquares(noise.data(), n);
  SetCpuThreads(3);
  const double three_threads = SumOfSquares(noise.data(), n);
  SetCpuThreads(saved_threads);
  EXPECT_EQ(one_thread, three_threads);
  EXPECT_NEAR(one_thread, n, 5 * std::sqrt(2.0 * n));  // chi-square(n): mean n, sd sqrt(2n)
}

TEST(ReduceTest, ScaleAndAddAreElementwise) {
  const int64_t n = 70001;
  const std::vector<float> x = RandomVector(n, 2);
  const std::vector<float> y0 = RandomVector(n, 3);
  std::vector<float> y = y0;
  Add(x.data(), y.data(), n);
  std::vector<float> scaled = x;
  Scale(scaled.data(), n, -0.5f);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], y0[i] + x[i]) << i;
    ASSERT_EQ(scaled[i], x[i] * -0.5f) << i;
  }
}

}  // namespace
}  // namespace tetra::cpu
