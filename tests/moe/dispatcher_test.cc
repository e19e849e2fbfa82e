// The MoE token dispatcher on one rank: permute groups rows by expert and
// the exchanges round-trip, capacity drops the lowest weights, and the whole
// routed path (permute, experts, combine) passes finite-difference checks.
#include "moe/dispatcher.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/self_communicator.h"
#include "gtest/gtest.h"
#include "moe/grouped_experts.h"
#include "tests/testing/gradient_check.h"

namespace tetra {
namespace {

// Tolerances, with their reasons.
// Central differences of an fp32 forward (h = 1e-2) through two GEMMs and SwiGLU.
constexpr testing::GradCheckOptions kGradCheck = {.step = 1e-2, .rel_tol = 2e-2, .abs_tol = 2e-4};

Tensor Random(const Shape& shape, uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::Empty(shape);
  const std::vector<float> v = testing::RandomVector(t.numel(), stream, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v[i];
  return t;
}

std::vector<float> Values(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// The first `n` int32 values of t.
std::vector<int32_t> Ints(const Tensor& t, int64_t n) {
  return {t.data<int32_t>(), t.data<int32_t>() + n};
}

// A router's choice of `expert` (N k ids) with `weights` (N, k).
Routing Choice(const std::vector<int32_t>& expert, const Tensor& weights) {
  Routing r;
  r.weights = weights;
  r.expert = Tensor::Empty(weights.shape(), DType::kI32);
  std::copy(expert.begin(), expert.end(), r.expert.data<int32_t>());
  return r;
}

TEST(DispatcherTest, PermuteGroupsByExpertAndUnpermuteSumsBack) {
  SelfCommunicator self;
  TokenDispatcher dispatcher(4, 2, /*capacity_factor=*/0, self);
  // 4 tokens, 2 experts each.
  const std::vector<int32_t> expert = {3, 0, 1, 3, 0, 2, 3, 1};
  DispatchPlan plan;
  dispatcher.Plan(Choice(expert, Tensor::Zeros({4, 2})), &plan);
  EXPECT_EQ(plan.expert_rows, (std::vector<int64_t>{2, 2, 1, 3}));
  EXPECT_EQ(plan.rows, 8);
  EXPECT_EQ(Ints(plan.send_token, 8), (std::vector<int32_t>{0, 2, 1, 3, 2, 0, 1, 3}));
  EXPECT_EQ(plan.dropped, 0);
  const Tensor x = Random({4, 3}, 1);
  Tensor send, grouped, back;
  dispatcher.Permute(plan, x, &send);
  for (int64_t row = 0; row < send.dim(0); ++row) {
    const int32_t token = plan.send_token.data<int32_t>()[row];
    for (int i = 0; i < 3; ++i) EXPECT_EQ(send.f32()[row * 3 + i], x.f32()[token * 3 + i]);
  }
  dispatcher.ToExperts(plan, send, &grouped);
  dispatcher.FromExperts(plan, grouped, &back);
  EXPECT_EQ(Values(back), Values(send));
  // Each token was sent twice: un-permuting sums the copies, 2x.
  const Tensor dx = Tensor::Empty({4, 3});
  dispatcher.Unpermute(plan, send, dx);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(dx.f32()[i], 2 * x.f32()[i]);
}

TEST(DispatcherTest, PermuteThenUnpermuteIsTheIdentityWithOneChoice) {
  SelfCommunicator self;
  TokenDispatcher dispatcher(3, 1, 0, self);
  DispatchPlan plan;
  dispatcher.Plan(Choice({2, 0, 2, 1, 0}, Tensor::Zeros({5, 1})), &plan);
  const Tensor x = Random({5, 4}, 2);
  Tensor send;
  const Tensor back = Tensor::Empty({5, 4});
  dispatcher.Permute(plan, x, &send);
  dispatcher.Unpermute(plan, send, back);
  EXPECT_EQ(Values(back), Values(x));
}

TEST(DispatcherTest, CapacityDropsTheLowestWeights) {
  SelfCommunicator self;
  // 4 tokens, k = 1, 2 experts, c = 1: capacity ceil(4 / 2) = 2 per expert.
  TokenDispatcher dispatcher(2, 1, /*capacity_factor=*/1.0, self);
  Tensor weights = Tensor::Empty({4, 1});
  for (int t = 0; t < 4; ++t) weights.f32()[t] = std::vector<float>{0.3f, 0.9f, 0.1f, 0.5f}[t];
  DispatchPlan plan;
  dispatcher.Plan(Choice({0, 0, 0, 0}, weights), &plan);
  EXPECT_EQ(plan.dropped, 2);
  EXPECT_EQ(plan.rows, 2);
  EXPECT_EQ(Ints(plan.send_token, 2), (std::vector<int32_t>{1, 3}));  // weights 0.9 and 0.5 kept
  EXPECT_EQ(Ints(plan.send_row, 4), (std::vector<int32_t>{-1, 0, -1, 1}));
  const Tensor y = Random({2, 3}, 3), out = Tensor::Empty({4, 3});
  dispatcher.Combine(plan, weights, y, out);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out.f32()[i], 0.0f);  // token 0 dropped: no routed output
    EXPECT_EQ(out.f32()[3 + i], 0.9f * y.f32()[i]);
  }
}

// The routed path with a fixed choice: out = Combine(w, experts(Permute(x))).
// L = sum(out * probe); gradients in x, the combine weights and every expert weight.
TEST(DispatcherTest, DispatchExpertsCombineGradients) {
  SelfCommunicator self;
  const int experts = 3, k = 2, c = 4, inter = 5;
  const int64_t n = 6;
  TokenDispatcher dispatcher(experts, k, 0, self);
  const std::vector<int32_t> choice = {0, 2, 1, 0, 2, 1, 0, 1, 2, 0, 1, 2};
  const Tensor x = Random({n, c}, 4), weights = Random({n, k}, 5, 0.5f);
  std::vector<ExpertWeights> w(experts);
  for (int e = 0; e < experts; ++e) {
    w[e] = {Random({inter, c}, 10 + e, 0.5f), Random({inter, c}, 20 + e, 0.5f),
            Random({c, inter}, 30 + e, 0.5f), Tensor::Zeros({inter, c}),
            Tensor::Zeros({inter, c}),        Tensor::Zeros({c, inter})};
  }
  const std::vector<float> probe = testing::RandomVector(n * c, 6);
  DispatchPlan plan;
  dispatcher.Plan(Choice(choice, weights), &plan);
  GroupedActivations a;
  Tensor send, grouped, y_grouped, y_send;
  const Tensor out = Tensor::Empty({n, c});
  auto loss = [&] {
    dispatcher.Permute(plan, x, &send);
    dispatcher.ToExperts(plan, send, &grouped);
    GroupedSwigluForward(w, plan.expert_rows, grouped, &a, &y_grouped);
    dispatcher.FromExperts(plan, y_grouped, &y_send);
    dispatcher.Combine(plan, weights, y_send, out);
    return testing::ProbeLoss(out.f32(), probe);
  };
  loss();
  Tensor dy_send, dy_grouped, dx_grouped, dx_send, s1, s2, s3;
  const Tensor dweights = Tensor::Empty({n, k}), dx = Tensor::Empty({n, c});
  Tensor dout = Tensor::Empty({n, c});
  for (int64_t i = 0; i < n * c; ++i) dout.f32()[i] = probe[i];
  dispatcher.CombineBackward(plan, weights, y_send, dout, &dy_send, dweights);
  dispatcher.ToExperts(plan, dy_send, &dy_grouped);
  WeightGradients now;
  GroupedSwigluBackward(w, a, dy_grouped, &dx_grouped, &s1, &s2, &s3, now);
  dispatcher.FromExperts(plan, dx_grouped, &dx_send);
  dispatcher.Unpermute(plan, dx_send, dx);
  testing::ExpectGradientMatches("dx", x.f32(), x.numel(), dx.f32(), loss, kGradCheck);
  testing::ExpectGradientMatches("dweights", weights.f32(), weights.numel(), dweights.f32(), loss,
                                 kGradCheck);
  for (int e = 0; e < experts; ++e) {
    testing::ExpectGradientMatches("gate", w[e].gate_proj.f32(), w[e].gate_proj.numel(),
                                   w[e].gate_grad.f32(), loss, kGradCheck);
    testing::ExpectGradientMatches("up", w[e].up_proj.f32(), w[e].up_proj.numel(),
                                   w[e].up_grad.f32(), loss, kGradCheck);
    testing::ExpectGradientMatches("down", w[e].down_proj.f32(), w[e].down_proj.numel(),
                                   w[e].down_grad.f32(), loss, kGradCheck);
  }
}

}  // namespace
}  // namespace tetra
