// The planner's arithmetic on two published model sizes, each number worked
// out by hand in the comments (not copied from the planner's output).
#include "plan/layout_planner.h"

#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "plan/cluster_config.h"
#include "tests/testing/configs.h"

namespace tetra {
namespace {

// Tolerances: parameter counts and bytes are sums of integers below 2^53,
// exact in double; divisions by tp, ep and dp are of exact multiples except
// ZeRO's dense / dp (a power of two: exact too). So comparisons are exact.

TrainerConfig Recipe(const std::string& name) { return testing::RecipeConfig(name); }

ClusterConfig Cluster(const std::string& name) {
  auto cluster = LoadClusterFile(std::string(TETRA_SOURCE_DIR) + "/configs/clusters/" + name);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

// DeepSeek-V3 size: 61 layers (3 dense), hidden c = 7168, 128 heads of 56
// (q = kv = 7168), dense MLP 18432, 256 routed experts (k = 8) + 1 shared of
// width 2048, vocabulary 129280, 4096 tokens per micro-batch of 1 sequence.
// On 2048 H800s: tp 1, pp 16, dp 128, ep 64 (experts' data-parallel 2), ZeRO-1.
//   attention  2 c q + 2 c kv = 4 x 7168^2          = 205,520,896
//   norms      2 c                                   =      14,336
//   dense MLP  3 x 7168 x 18432                      = 396,361,728
//   an expert  3 x 7168 x 2048                       =  44,040,192
//   routed     256 experts                           = 11,274,289,152 per MoE layer
//   router     256 x 7168                            =   1,835,008
//   embedding  129280 x 7168 (1010 x 128 rows: no padding) = 926,679,040
// 61 layers over 16 stages: 61 = 16 x 3 + 13, stages 0-12 hold 4 layers.
// Stage 0 (layers 0-3: 3 dense, 1 MoE, and the embedding) holds most:
//   dense  4 x (205,520,896 + 14,336) + 3 x 396,361,728 + (44,040,192 + 1,835,008)
//          + 926,679,040                              = 2,983,780,352
//   expert 11,274,289,152 / 64                        =   176,160,768
TEST(LayoutPlannerTest, DeepSeekV3SizeFitsOn2048H800sWithPp16Ep64Zero1) {
  const TrainerConfig config = Recipe("deepseek_v3_size.textproto");
  const ClusterConfig cluster = Cluster("h800_2048.textproto");
  PlanLayout layout{.mesh = MeshShape::Of(1, 16, 128, 64), .zero_stage = 1, .recompute = true};
  const DeviceParameters p = ParametersPerDevice(config.model(), layout);
  EXPECT_EQ(p.dense, 2983780352.0);
  EXPECT_EQ(p.expert, 176160768.0);

  const LayoutPrediction with_recompute = PredictLayout(config, cluster, layout);
  // 3,159,941,120 parameters: bf16 weights 2 B, fp32 gradients 4 B; optimizer
  // 12 B of dense / 128 + experts / 2 (ZeRO-1 over dp, and over edp = 2):
  //   weights    6,319,882,240   gradients 12,639,764,480
  //   optimizer  12 x (23,310,784 + 88,080,384) = 1,336,694,016
  EXPECT_EQ(with_recompute.memory.weights, 6319882240.0);
  EXPECT_EQ(with_recompute.memory.grads, 12639764480.0);
  EXPECT_EQ(with_recompute.memory.optimizer, 1336694016.0);
  // Full recompute keeps each layer's input, c = 7168 per token, for the 16
  // micro-batches 1F1B holds on stage 0 (16 x 4096 tokens x 4 layers x 7168
  // x 2 B = 3,758,096,384) plus one layer's working set, the MoE layer's
  // 4c + 2q + 2kv + (8 + 1) x 3 x 2048 + 2 x 8 x 7168 + 256 = 227,584 per
  // token (the dense layer's 4c + 2q + 2kv + 3 x 18432 = 112,640 is smaller):
  // 4096 x 227,584 x 2 B = 1,864,368,128.
  EXPECT_EQ(with_recompute.memory.activations, 3758096384.0 + 1864368128.0);
  // 25.9 GB of 72 usable.
  EXPECT_TRUE(with_recompute.fits);
  EXPECT_EQ(with_recompute.micro_batches, 15360 / 128);

  // Without recompute every layer keeps its activations; stage 1 (4 MoE
  // layers, 15 micro-batches in flight) then needs most:
  // 15 x 4096 x 4 x 227,584 x 2 B = 111,862,087,680 bytes: too much.
  layout.recompute = false;
  const LayoutPrediction without = PredictLayout(config, cluster, layout);
  EXPECT_EQ(without.memory.activations, 111862087680.0);
  EXPECT_FALSE(without.fits);

  // The search lists it among the layouts that fit.
  const std::vector<LayoutPrediction> plans = PlanLayouts(config, cluster, 2048);
  const auto found = std::find_if(plans.begin(), plans.end(), [](const LayoutPrediction& p) {
    const PlanLayout& l = p.layout;
    return l.mesh.tp == 1 && l.mesh.pp == 16 && l.mesh.dp == 128 && l.mesh.ep == 64 && l.zero_stage == 1 && l.recompute;
  });
  ASSERT_NE(found, plans.end());
  EXPECT_TRUE(found->fits);
  EXPECT_TRUE(plans.front().fits);
  EXPECT_GT(found->mfu, 0.05);
  EXPECT_LT(found->mfu, 0.55);  // below the cluster's compute efficiency
}

// Llama-3-70B size: 80 layers, c = 8192, 64 heads of 128 (q = 8192), 8 KV
// heads (kv = 1024), MLP 28672, vocabulary 128256, 8192 tokens per micro-batch.
// On 64 A100s as tp 8 x pp 4 x dp 2 with ZeRO-1, 20 layers per stage:
//   attention  2 x 8192 x 8192 + 2 x 8192 x 1024 = 150,994,944  (/8 = 18,874,368)
//   MLP        3 x 8192 x 28672                  = 704,643,072  (/8 = 88,080,384)
//   norms      2 x 8192                          =      16,384  (replicated)
//   per layer per device                         = 106,971,136
//   head       128256 padded to a multiple of 128 x 8 = 1024: 129024 rows,
//              129024 x 8192 / 8 = 132,120,576, and the final norm 8192
// The last stage: 20 x 106,971,136 + 132,120,576 + 8192 = 2,271,551,488.
TEST(LayoutPlannerTest, Llama3_70BSizeMemoryOnA100s) {
  const TrainerConfig config = Recipe("llama3_70b_size.textproto");
  const ClusterConfig cluster = Cluster("a100_64.textproto");
  const PlanLayout layout{.mesh = MeshShape::Of(8, 4, 2), .zero_stage = 1, .recompute = false};
  const DeviceParameters p = ParametersPerDevice(config.model(), layout);
  EXPECT_EQ(p.dense, 2271551488.0);
  EXPECT_EQ(p.expert, 0.0);
  // Stage 0 holds 2,271,543,296 parameters (the embedding, no final norm) but
  // 4 micro-batches of activations (1F1B: pp - 0); per token and layer
  // 4c + 2q + 2kv + 3 x 28672 = 137,216 elements, split over tp 8 (sequence
  // parallel): 4 x 8192 x 20 x 137,216 x 2 B / 8 = 22,481,469,440.
  // The last stage holds 1 (5,620,367,360) plus fp32 logits 8192 x 129024 / 8
  // x 4 B = 528,482,304: less. So stage 0 is the one reported:
  //   weights   2 x 2,271,543,296  =  4,543,086,592
  //   gradients 4 x                =  9,086,173,184
  //   optimizer 12 x / 2           = 13,629,259,776
  const LayoutPrediction plan = PredictLayout(config, cluster, layout);
  EXPECT_EQ(plan.memory.weights, 4543086592.0);
  EXPECT_EQ(plan.memory.grads, 9086173184.0);
  EXPECT_EQ(plan.memory.optimizer, 13629259776.0);
  EXPECT_EQ(plan.memory.activations, 22481469440.0);
  EXPECT_EQ(plan.micro_batches, 1024 / 2);
  EXPECT_TRUE(plan.fits);  // 49.7 GB of 72
  // One device cannot hold it: 70.55e9 parameters x 18 B alone is 1.27 TB.
  const PlanLayout alone{.mesh = MeshShape{}, .zero_stage = 0, .recompute = true};
  EXPECT_FALSE(PredictLayout(config, cluster, alone).fits);
}

TEST(LayoutPlannerTest, BubbleAndStepTimeFollowTheSchedule) {
  // With equal stages the bubble is (p - 1) slots of m + p - 1.
  TrainerConfig config = Recipe("llama3_70b_size.textproto");
  const ClusterConfig cluster = Cluster("a100_64.textproto");
  config.mutable_train()->set_global_batch_size(16);
  config.mutable_model()->set_vocab_size(8);  // near-equal stages: the head is negligible
  const LayoutPrediction plan =
      PredictLayout(config, cluster, {.mesh = MeshShape::Of(8, 4, 2), .zero_stage = 1, .recompute = true});
  ASSERT_EQ(plan.micro_batches, 8);
  const TimeEstimate& t = plan.time;
  const double slot = (t.compute_s + t.tp_s + t.ep_s) / 8;
  EXPECT_NEAR(t.bubble_s, 3 * slot, 1e-9 * t.bubble_s);
  EXPECT_NEAR(t.step_s(), t.compute_s + t.tp_s + t.ep_s + t.bubble_s + t.pp_s + t.dp_s + t.optimizer_s,
              1e-12 * t.step_s());
}

}  // namespace
}  // namespace tetra
