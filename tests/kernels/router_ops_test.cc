// The DeepSeek-V3 router's ops (kernels/ops.h) on the CPU: hand-checked
// choices and weights (top-k, group limiting, normalisation and scaling, the
// bias steering the choice but not the weights), balance-loss values (and
// the two-step loss split over context-parallel ranks), loads and the bias
// update, and finite-difference checks of the backward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra {
namespace {

// Tolerances, with their reasons.
constexpr double kFp32Tol = 1e-6;  // one fp32 sigmoid/softmax and a division
// Central differences of an fp32 forward with h = 1e-2 on logits of order 1.
constexpr testing::GradCheckOptions kGradCheck = {.step = 1e-2, .rel_tol = 2e-2, .abs_tol = 2e-4};

Tensor FromVector(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::Empty(shape);
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

RouterSpec Sigmoid(int experts, int k) { return RouterSpec{.num_experts = experts, .top_k = k}; }

// One micro-batch's routing through the ops, as moe/router.h's Route runs them.
struct Routing {
  Tensor scores, expert, weights;
  std::vector<int32_t> experts() const {
    return std::vector<int32_t>(expert.data<int32_t>(), expert.data<int32_t>() + expert.numel());
  }
};

void Route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Routing* r) {
  const int64_t n = logits.dim(0);
  r->scores = Tensor::Empty({n, spec.num_experts});
  r->expert = Tensor::Empty({n, spec.top_k}, DType::kI32);
  r->weights = Tensor::Empty({n, spec.top_k});
  ops::RouterScores(spec, logits, r->scores);
  ops::RouterTopK(spec, r->scores, bias, r->expert, r->weights);
}

// The balance loss of batch whole sequences of seq tokens: both steps, the
// statistics summed over no ranks.
double BalanceLoss(const RouterSpec& c, const Routing& r, int64_t batch, int64_t seq,
                   float grad_scale, const Tensor& dscores) {
  Tensor stats = Tensor::Empty({batch, 2 * c.num_experts}, DType::kF64);
  ops::SequenceBalanceStats(c, r.scores, r.expert, batch, seq, seq, stats);
  return ops::SequenceBalanceLoss(c, r.scores, stats, batch, seq, seq, grad_scale, dscores);
}

float Logit(float p) { return std::log(p / (1 - p)); }

TEST(RouterTest, SigmoidTopKNormalisedAndScaled) {
  RouterSpec c = Sigmoid(4, 2);
  c.routed_scaling_factor = 2.5f;
  Routing r;
  Route(c, FromVector({0, 1, -1, 2}, {1, 4}), Tensor::Zeros({4}), &r);
  // s = sigmoid(0, 1, -1, 2) = (0.5, 0.731059, 0.268941, 0.880797): experts 3 and 1,
  // weights 2.5 s / (s_3 + s_1).
  EXPECT_EQ(r.experts(), (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(r.weights.f32()[0], 1.3661227579, kFp32Tol);
  EXPECT_NEAR(r.weights.f32()[1], 1.1338772421, kFp32Tol);
  EXPECT_NEAR(r.scores.f32()[2], 0.2689414214, kFp32Tol);
}

TEST(RouterTest, BiasChangesTheChoiceButNotTheWeights) {
  const RouterSpec c = Sigmoid(4, 2);
  Routing r;
  // Biased scores (0.5, 0.731, 1.269, 0.881): experts 2 and 3; the weights
  // are the unbiased s_2, s_3 normalised.
  Route(c, FromVector({0, 1, -1, 2}, {1, 4}), FromVector({0, 0, 1, 0}, {4}), &r);
  EXPECT_EQ(r.experts(), (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(r.weights.f32()[0], 0.2339152960, kFp32Tol);
  EXPECT_NEAR(r.weights.f32()[1], 0.7660847040, kFp32Tol);
}

TEST(RouterTest, GroupLimitedCandidates) {
  RouterSpec c = Sigmoid(8, 2);
  c.n_group = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  c.topk_group = 2;
  // Group sums of the top 2: 1.0, 1.2, 0.9, 0.95 -> groups 1 and 0. Without
  // the limit the best two would be experts 0 (0.9) and 4 (0.85).
  std::vector<float> logits;
  for (float p : {0.9f, 0.1f, 0.6f, 0.6f, 0.85f, 0.05f, 0.45f, 0.5f}) logits.push_back(Logit(p));
  Routing r;
  Route(c, FromVector(logits, {1, 8}), Tensor::Zeros({8}), &r);
  EXPECT_EQ(r.experts(), (std::vector<int32_t>{0, 2}));  // 2 and 3 tie: the lower index
  EXPECT_NEAR(r.weights.f32()[0], 0.9 / 1.5, kFp32Tol);
  c.n_group = 1;
  c.topk_group = 1;
  Route(c, FromVector(logits, {1, 8}), Tensor::Zeros({8}), &r);
  EXPECT_EQ(r.experts(), (std::vector<int32_t>{0, 4}));
}

TEST(RouterTest, SoftmaxScoresWithoutNormalisation) {
  RouterSpec c = Sigmoid(3, 1);
  c.softmax = true;
  c.norm_topk_prob = false;
  Routing r;
  Route(c, FromVector({1, 2, 3}, {1, 3}), Tensor::Zeros({3}), &r);
  EXPECT_EQ(r.experts(), (std::vector<int32_t>{2}));
  EXPECT_NEAR(r.weights.f32()[0], 0.6652409558, kFp32Tol);  // e^3 / (e + e^2 + e^3)
}

TEST(RouterTest, SequenceBalanceLossHandCases) {
  const RouterSpec c = Sigmoid(2, 1);
  Routing r;
  // Balanced: each token picks a different expert, f = (1, 1), P = (0.5, 0.5): 1.
  Route(c, FromVector({0, 1, 1, 0}, {2, 2}), Tensor::Zeros({2}), &r);
  EXPECT_NEAR(BalanceLoss(c, r, 1, 2, 0, Tensor()), 1.0, kFp32Tol);
  // Both pick expert 1: f = (0, 2), P_1 = mean(s(1) / (s(0) + s(1)), s(2) / (s(0) + s(2))).
  Route(c, FromVector({0, 1, 0, 2}, {2, 2}), Tensor::Zeros({2}), &r);
  EXPECT_NEAR(BalanceLoss(c, r, 1, 2, 0, Tensor()), 1.2317357963, kFp32Tol);
  // As two sequences of one token: f = (0, 2) each; P_1 per token.
  EXPECT_NEAR(BalanceLoss(c, r, 2, 1, 0, Tensor()), 1.2317357963 * 2, kFp32Tol);
}

// Rows `rows` of an (N, width) fp32 or int32 tensor, in that order.
Tensor TakeRows(const Tensor& t, const std::vector<int64_t>& rows) {
  Tensor out = Tensor::Empty({static_cast<int64_t>(rows.size()), t.dim(1)}, t.dtype());
  const size_t row_bytes = t.nbytes() / t.dim(0);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(static_cast<char*>(out.raw()) + r * row_bytes,
                static_cast<const char*>(t.raw()) + rows[r] * row_bytes, row_bytes);
  }
  return out;
}

// Context parallelism's balance loss: each of the batch sequences of `whole`
// tokens split over two "ranks", rank 0 holding its tokens `part0` (in
// order) and rank 1 the others; each rank's statistics (computed with
// whole_seq = whole), summed, give each rank the whole batch's loss and its
// tokens' gradients. Returns the loss rank 0 computes; dscores (batch whole,
// E) += each rank's gradient, scattered back to the whole rows.
double SplitBalanceLoss(const RouterSpec& c, const Tensor& scores, const Tensor& expert,
                        int64_t batch, int64_t whole, const std::vector<int64_t>& part0,
                        float grad_scale, const Tensor& dscores) {
  const int64_t e = c.num_experts;
  std::vector<int64_t> tokens[2];
  for (int64_t t = 0; t < whole; ++t) {
    const bool on_rank0 = std::find(part0.begin(), part0.end(), t) != part0.end();
    tokens[on_rank0 ? 0 : 1].push_back(t);
  }
  std::vector<int64_t> rows[2];
  Tensor stats[2], summed = Tensor::Zeros({batch, 2 * e}, DType::kF64);
  for (int r = 0; r < 2; ++r) {
    for (int64_t b = 0; b < batch; ++b) {
      for (const int64_t t : tokens[r]) rows[r].push_back(b * whole + t);
    }
    const int64_t seq = static_cast<int64_t>(tokens[r].size());
    stats[r] = Tensor::Empty({batch, 2 * e}, DType::kF64);
    ops::SequenceBalanceStats(c, TakeRows(scores, rows[r]), TakeRows(expert, rows[r]), batch, seq,
                              whole, stats[r]);
    for (int64_t i = 0; i < batch * 2 * e; ++i)
      summed.data<double>()[i] += stats[r].data<double>()[i];  // all-reduce
  }
  double losses[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t seq = static_cast<int64_t>(tokens[r].size());
    const Tensor part_scores = TakeRows(scores, rows[r]);
    Tensor part_dscores;
    if (dscores.defined()) part_dscores = TakeRows(dscores, rows[r]);
    losses[r] = ops::SequenceBalanceLoss(c, part_scores, summed, batch, seq, whole, grad_scale,
                                         part_dscores);
    if (!dscores.defined()) continue;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      std::memcpy(dscores.f32() + rows[r][i] * e, part_dscores.f32() + i * e, e * sizeof(float));
    }
  }
  EXPECT_EQ(losses[0], losses[1]) << "the ranks' losses from the same summed statistics";
  return losses[0];
}

TEST(RouterTest, SequenceBalanceLossSplitOverRanks) {
  RouterSpec c = Sigmoid(8, 3);
  c.n_group = 4;
  c.topk_group = 2;
  constexpr int64_t kBatch = 2, kWhole = 12, kN = kBatch * kWhole;
  const int64_t e = c.num_experts;
  Tensor logits = FromVector(testing::RandomVector(kN * e, 21, 2.0f), {kN, e});
  Routing r;
  Route(c, logits, FromVector(testing::RandomVector(e, 22, 0.1f), {e}), &r);
  const float g = 0.8f;
  const Tensor initial = FromVector(testing::RandomVector(kN * e, 23, 0.01f), {kN, e});
  Tensor whole_dscores = initial.Clone();
  const double whole_loss = BalanceLoss(c, r, kBatch, kWhole, g, whole_dscores);
  // Rows 0-4 and 5-11; and context parallelism's halves of 4 chunks of 3,
  // chunks 0 and 3 on rank 0.
  const std::vector<int64_t> splits[] = {{0, 1, 2, 3, 4}, {0, 1, 2, 9, 10, 11}};
  for (const std::vector<int64_t>& part0 : splits) {
    SCOPED_TRACE(::testing::Message()
                 << "rank 0 holds " << part0.size() << " tokens from " << part0.front());
    Tensor dscores = initial.Clone();
    const double loss = SplitBalanceLoss(c, r.scores, r.expert, kBatch, kWhole, part0, g, dscores);
    EXPECT_NEAR(loss, whole_loss, 1e-12 * whole_loss);
    EXPECT_NEAR(SplitBalanceLoss(c, r.scores, r.expert, kBatch, kWhole, part0, 0, Tensor()),
                whole_loss, 1e-12 * whole_loss);
    for (int64_t i = 0; i < kN * e; ++i) {
      ASSERT_NEAR(dscores.f32()[i], whole_dscores.f32()[i], 1e-6) << "dscores[" << i << "]";
    }
  }
  // The split loss's gradient, the choices held (f counts them): through the
  // scores to the logits, by finite differences.
  const std::vector<int64_t> part0 = {0, 1, 2, 9, 10, 11};
  const float g_fd = 10.0f;
  Tensor scores = Tensor::Empty({kN, e});
  auto loss = [&] {
    ops::RouterScores(c, logits, scores);
    return g_fd * SplitBalanceLoss(c, scores, r.expert, kBatch, kWhole, part0, 0, Tensor());
  };
  loss();
  Tensor dscores = Tensor::Zeros({kN, e}), dlogits = Tensor::Empty({kN, e});
  SplitBalanceLoss(c, scores, r.expert, kBatch, kWhole, part0, g_fd, dscores);
  ops::RouterScoresBackward(c, scores, dscores, dlogits);
  testing::ExpectGradientMatches("dlogits", logits.f32(), kN * e, dlogits.f32(), loss, kGradCheck);
}

TEST(RouterTest, LoadsAndBiasUpdate) {
  const RouterSpec c = Sigmoid(4, 2);
  Routing r;
  Route(c, FromVector({0, 1, -1, 2, 0, 1, -1, 2, 3, 2, 1, 0}, {3, 4}), Tensor::Zeros({4}), &r);
  Tensor loads = Tensor::Zeros({4}, DType::kI32);
  ops::CountExpertLoads(c, r.expert, loads);
  ops::CountExpertLoads(c, r.expert, loads);  // adds
  EXPECT_EQ(std::vector<int32_t>(loads.data<int32_t>(), loads.data<int32_t>() + 4),
            (std::vector<int32_t>{2, 6, 0, 4}));  // twice (3,1) (3,1) (0,1)
  Tensor bias = Tensor::Zeros({4});
  auto update = [&](std::vector<int32_t> values) {
    Tensor l = Tensor::Empty({4}, DType::kI32);
    std::copy(values.begin(), values.end(), l.data<int32_t>());
    ops::UpdateRouterBias(l, 0.25, bias);
  };
  update({0, 3, 1, 2});  // mean 1.5
  EXPECT_EQ(std::vector<float>(bias.f32(), bias.f32() + 4),
            (std::vector<float>{0.25f, -0.25f, 0.25f, -0.25f}));
  update({1, 1, 1, 1});  // balanced: no change
  EXPECT_EQ(bias.f32()[0], 0.25f);
}

// L = sum(weights * probe) + g * balance loss, through the logits.
void CheckRouterGradient(const RouterSpec& c, int64_t batch, int64_t seq) {
  const int64_t n = batch * seq;
  const int e = c.num_experts, k = c.top_k;
  const float g = 0.7f;
  std::vector<float> logit_values = testing::RandomVector(n * e, 1);
  Tensor logits = FromVector(logit_values, {n, e});
  Tensor bias = FromVector(testing::RandomVector(e, 2, 0.1f), {e});
  const std::vector<float> probe = testing::RandomVector(n * k, 3);
  Routing r;
  auto loss = [&] {
    Route(c, logits, bias, &r);
    return testing::ProbeLoss(r.weights.f32(), probe) +
           g * BalanceLoss(c, r, batch, seq, 0, Tensor());
  };
  loss();
  Tensor dscores = Tensor::Zeros({n, e}), dlogits = Tensor::Empty({n, e});
  ops::RouterWeightsBackward(c, r.scores, r.expert, FromVector(probe, {n, k}), dscores);
  BalanceLoss(c, r, batch, seq, g, dscores);
  ops::RouterScoresBackward(c, r.scores, dscores, dlogits);
  testing::ExpectGradientMatches("dlogits", logits.f32(), n * e, dlogits.f32(), loss, kGradCheck);
}

TEST(RouterTest, GradientSigmoidGrouped) {
  RouterSpec c = Sigmoid(8, 3);
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5f;
  CheckRouterGradient(c, 2, 3);
}

TEST(RouterTest, GradientSoftmaxUnnormalised) {
  RouterSpec c = Sigmoid(6, 2);
  c.softmax = true;
  c.norm_topk_prob = false;
  CheckRouterGradient(c, 3, 2);
}

}  // namespace
}  // namespace tetra
