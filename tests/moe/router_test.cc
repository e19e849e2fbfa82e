// The router as the MoE layer runs it: settings from the config, routing
// through the ops (tests/kernels/router_ops_test.cc checks their arithmetic) and
// the load imbalance the metrics report.
#include "moe/router.h"

#include <vector>

#include "gtest/gtest.h"

namespace tetra {
namespace {

TEST(RouterTest, SpecFromTheConfigsFields) {
  MoeConfig moe;
  moe.set_n_routed_experts(8);
  moe.set_num_experts_per_tok(3);
  moe.set_n_group(4);
  moe.set_topk_group(2);
  moe.set_scoring_func("softmax");
  moe.set_norm_topk_prob(false);
  moe.set_routed_scaling_factor(2.5);
  const RouterSpec spec = RouterSpecFromConfig(moe);
  EXPECT_EQ(spec.num_experts, 8);
  EXPECT_EQ(spec.top_k, 3);
  EXPECT_EQ(spec.n_group, 4);
  EXPECT_EQ(spec.topk_group, 2);
  EXPECT_TRUE(spec.softmax);
  EXPECT_FALSE(spec.norm_topk_prob);
  EXPECT_EQ(spec.routed_scaling_factor, 2.5f);
  moe.set_scoring_func("sigmoid");
  EXPECT_FALSE(RouterSpecFromConfig(moe).softmax);
}

TEST(RouterTest, RouteChoosesAndWeighs) {
  const RouterSpec spec{.num_experts = 4, .top_k = 2, .routed_scaling_factor = 2.5f};
  Tensor logits = Tensor::Empty({1, 4});
  const std::vector<float> values = {0, 1, -1, 2};
  std::copy(values.begin(), values.end(), logits.f32());
  Routing r;
  Route(spec, logits, Tensor::Zeros({4}), &r);
  // s = sigmoid(0, 1, -1, 2): experts 3 and 1, weights 2.5 s / (s_3 + s_1).
  EXPECT_EQ(r.tokens(), 1);
  EXPECT_EQ(r.expert.data<int32_t>()[0], 3);
  EXPECT_EQ(r.expert.data<int32_t>()[1], 1);
  EXPECT_NEAR(r.weights.f32()[0], 1.3661227579, 1e-6);
  EXPECT_NEAR(r.scores.f32()[2], 0.2689414214, 1e-6);
}

TEST(RouterTest, LoadImbalanceIsMaxOverMean) {
  EXPECT_NEAR(LoadImbalance({1, 3, 0, 2}), 3 / 1.5, 1e-12);
  EXPECT_EQ(LoadImbalance({0, 0, 0}), 1.0);
  EXPECT_EQ(LoadImbalance({5, 5}), 1.0);
}

}  // namespace
}  // namespace tetra
