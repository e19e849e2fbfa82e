#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"
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
  std::vector<float> sum(n), y = y0;
  Add(x.data(), y0.data(), sum.data(), n);
  Add(x.data(), y.data(), y.data(), n);  // in place: y += x
  std::vector<float> scaled = x;
  Scale(scaled.data(), n, -0.5f);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], y0[i] + x[i]) << i;
    ASSERT_EQ(y[i], y0[i] + x[i]) << i;
    ASSERT_EQ(scaled[i], x[i] * -0.5f) << i;
  }
}

// Pieces of one flat buffer, as the optimizer's: empty, one element, a block
// and a block plus one (SumOfSquares' blocks are 2^14), a long ragged one.
constexpr int64_t kPieceSizes[] = {0, 1, 1 << 14, (1 << 14) + 1, 100003, 7};

TEST(ReduceTest, WeightedSumOfSquaresIsExactOnIntegers) {
  // Integer squares and power-of-two weights: every partial sum is exact, so
  // the expected total is independent of any summation order.
  const double weights[] = {1.0, 0.5, 0.25, 1.0, 0.125, 2.0};
  std::vector<std::vector<float>> pieces;
  std::vector<const float*> xs;
  std::vector<int64_t> sizes;
  double expected = 0;
  for (size_t k = 0; k < std::size(kPieceSizes); ++k) {
    std::vector<float>& piece = pieces.emplace_back(kPieceSizes[k]);
    for (int64_t i = 0; i < kPieceSizes[k]; ++i) {
      piece[i] = static_cast<float>((i + 3 * k) % 23) - 11.0f;
      expected += weights[k] * piece[i] * piece[i];
    }
  }
  for (size_t k = 0; k < pieces.size(); ++k) {
    xs.push_back(pieces[k].data());
    sizes.push_back(kPieceSizes[k]);
  }
  const std::vector<double> w(std::begin(weights), std::end(weights));
  EXPECT_EQ(WeightedSumOfSquares(xs, sizes, w), expected);
  EXPECT_EQ(WeightedSumOfSquares({}, {}, {}), 0.0);
}

TEST(ReduceTest, WeightedSumOfSquaresOfSlicesIsTheSumOfOneSumPerSlice) {
  // What LocalGradSquaredSum computed before the op existed: one SumOfSquares
  // per piece of the flat gradients, weighted and added in order. The
  // weights are powers of two, so weight x sum rounds the same whether or
  // not either side fuses it into the addition.
  int64_t total = 0;
  for (int64_t n : kPieceSizes) total += n;
  const Tensor flat = Tensor::Empty({total});
  const std::vector<float> values = RandomVector(total, 4);
  std::copy(values.begin(), values.end(), flat.f32());
  std::vector<Tensor> slices;
  std::vector<double> weights;
  double per_slice = 0, mean = 0, variance = 0;
  int64_t offset = 0;
  for (size_t k = 0; k < std::size(kPieceSizes); ++k) {
    const double w = k % 2 == 0 ? 1.0 : 0.5;
    slices.push_back(flat.Slice(offset, offset + kPieceSizes[k]));
    weights.push_back(w);
    per_slice += w * ops::SumOfSquares(slices.back());
    mean += w * kPieceSizes[k];  // each square is chi-square(1): mean 1, variance 2
    variance += 2 * w * w * kPieceSizes[k];
    offset += kPieceSizes[k];
  }
  const double got = ops::WeightedSumOfSquares(slices, weights);
  EXPECT_EQ(got, per_slice);
  EXPECT_NEAR(got, mean, 5 * std::sqrt(variance));
}

}  // namespace
}  // namespace tetra::cpu
