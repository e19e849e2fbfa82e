// The token-dispatch ops (kernels/ops.h) on the CPU: the dispatch order by
// hand (grouping by expert in pair order, capacity keeping the highest weights
// with ties to the earlier pair), row gathers, and CombineRows with its
// backward against finite differences.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra {
namespace {

// Central differences of an fp32 forward (h = 1e-2) through one weighted sum.
constexpr testing::GradCheckOptions kGradCheck = {.step = 1e-2, .rel_tol = 1e-2, .abs_tol = 1e-4};

Tensor Ints(const std::vector<int32_t>& values, const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

Tensor Floats(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::Empty(shape);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

std::vector<int32_t> IntsOf(const Tensor& t, int64_t n) {
  return {t.data<int32_t>(), t.data<int32_t>() + n};
}

struct Order {
  Tensor send_row, send_token, counts;
  int64_t rows = 0;
};

Order DispatchOf(const Tensor& expert, const Tensor& weights, int experts, int64_t capacity) {
  Order o{Tensor::Empty(expert.shape(), DType::kI32), Tensor::Empty({expert.numel()}, DType::kI32),
          Tensor::Empty({experts}, DType::kI32)};
  ops::DispatchOrder(expert, weights, capacity, o.send_row, o.send_token, o.counts);
  for (int e = 0; e < experts; ++e) o.rows += o.counts.data<int32_t>()[e];
  return o;
}

TEST(MoeDispatchTest, OrderGroupsPairsByExpertInPairOrder) {
  // 4 tokens x 2 choices: pairs (0:3, 0:0), (1:1, 1:3), (2:0, 2:2), (3:3, 3:1).
  const Tensor expert = Ints({3, 0, 1, 3, 0, 2, 3, 1}, {4, 2});
  const Order o = DispatchOf(expert, Tensor::Zeros({4, 2}), 4, -1);
  EXPECT_EQ(o.rows, 8);
  EXPECT_EQ(IntsOf(o.counts, 4), (std::vector<int32_t>{2, 2, 1, 3}));
  // Expert 0: pairs 1, 4; expert 1: 2, 7; expert 2: 5; expert 3: 0, 3, 6.
  EXPECT_EQ(IntsOf(o.send_row, 8), (std::vector<int32_t>{5, 0, 2, 6, 1, 4, 7, 3}));
  EXPECT_EQ(IntsOf(o.send_token, 8), (std::vector<int32_t>{0, 2, 1, 3, 2, 0, 1, 3}));
}

TEST(MoeDispatchTest, CapacityKeepsTheHighestWeightsTiesToTheEarlierPair) {
  // Five tokens all choose expert 1 of 2; capacity 3 keeps weights 0.9, 0.5
  // and the first of the two 0.4s, in pair order.
  const Tensor expert = Ints({1, 1, 1, 1, 1}, {5, 1});
  const Tensor weights = Floats({0.4f, 0.9f, 0.1f, 0.4f, 0.5f}, {5, 1});
  const Order o = DispatchOf(expert, weights, 2, 3);
  EXPECT_EQ(o.rows, 3);
  EXPECT_EQ(IntsOf(o.counts, 2), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(IntsOf(o.send_row, 5), (std::vector<int32_t>{0, 1, -1, -1, 2}));
  EXPECT_EQ(IntsOf(o.send_token, 3), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(DispatchOf(expert, weights, 2, 0).rows, 0);
}

TEST(MoeDispatchTest, GatherThenPlainCombineSumsEachTokensCopies) {
  const Tensor expert = Ints({1, 0, 0, 1, 1, 1}, {3, 2});
  const Order o = DispatchOf(expert, Tensor::Zeros({3, 2}), 2, -1);
  const Tensor x = Floats({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor send = Tensor::Empty({o.rows, 2});
  ops::GatherRows(x, o.send_token.Slice(0, o.rows), send);
  for (int64_t r = 0; r < o.rows; ++r) {
    const int32_t token = o.send_token.data<int32_t>()[r];
    EXPECT_EQ(send.f32()[2 * r], x.f32()[2 * token]);
    EXPECT_EQ(send.f32()[2 * r + 1], x.f32()[2 * token + 1]);
  }
  Tensor back = Tensor::Empty({3, 2});
  ops::CombineRows(send, o.send_row, Tensor(), back);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(back.f32()[i], 2 * x.f32()[i]);  // k = 2 copies each
}

// L = sum(CombineRows(src, index, weights) * probe), a dropped pair included.
TEST(MoeDispatchTest, CombineBackwardMatchesFiniteDifferences) {
  const int64_t n = 4, c = 3;
  const int k = 2;
  const Tensor index = Ints({2, 0, 1, -1, 4, 3, 6, 5}, {n, k});  // each row one pair's, as send_row
  std::vector<float> src_values = testing::RandomVector(7 * c, 1),
                     weight_values = testing::RandomVector(n * k, 2);
  Tensor src = Floats(src_values, {7, c}), weights = Floats(weight_values, {n, k});
  const std::vector<float> probe = testing::RandomVector(n * c, 3);
  Tensor out = Tensor::Empty({n, c});
  auto loss = [&] {
    ops::CombineRows(src, index, weights, out);
    return testing::ProbeLoss(out.f32(), probe);
  };
  loss();
  Tensor dsrc = Tensor::Zeros({7, c}), dweights = Tensor::Empty({n, k});
  ops::CombineRowsBackward(Floats(probe, {n, c}), src, index, weights, dsrc, dweights);
  EXPECT_EQ(dweights.f32()[3], 0.0f);  // the dropped pair
  testing::ExpectGradientMatches("dsrc", src.f32(), src.numel(), dsrc.f32(), loss, kGradCheck);
  testing::ExpectGradientMatches("dweights", weights.f32(), weights.numel(), dweights.f32(), loss,
                                 kGradCheck);
}

}  // namespace
}  // namespace tetra
