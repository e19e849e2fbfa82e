// The expert-parallel MoE layer against the single-rank one, under mpirun:
// the world is the expert-parallel group (8 experts over 2, 4 or 8 ranks),
// each rank routes its own slice of the tokens, and every rank also builds
// the single-rank layer (same seed: the same global weights) and runs it on
// all ranks' tokens. Compared: the outputs and input gradients of this
// rank's tokens; the router gate's and shared experts' gradients summed over
// ranks; each held expert's gradient (its tokens came from every rank); the
// balance-loss sums and the expert loads summed over ranks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "gtest/gtest.h"
#include "model/moe_mlp_layer.h"
#include "tests/testing/gradient_check.h"

namespace tetra {
namespace {

// Deadline of every collective: far above their run time with 8 ranks on 2
// cores, so a hang fails with the watchdog's message.
constexpr double kTimeoutS = 60;

// Tolerances, relative to the largest element of the reference tensor. Each
// token row goes through the same per-row arithmetic on either side (round-off
// identical or ~1e-7); weight gradients sum the same rows in another order
// (rows from several ranks, then a sum over ranks): ~1e-6. A token at the
// wrong expert or a gradient lost in transit is off by O(1).
constexpr double kOutputRel = 1e-5;
constexpr double kGradRel = 1e-4;

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

ModelConfig MoeConfigForTest() {
  ModelConfig c;
  c.set_hidden_size(16);
  c.set_num_hidden_layers(2);
  c.set_initializer_range(0.5);
  MoeConfig* moe = c.mutable_moe();
  moe->set_n_routed_experts(8);
  moe->set_num_experts_per_tok(2);
  moe->set_n_shared_experts(1);
  moe->set_moe_intermediate_size(8);
  moe->set_n_group(2);
  moe->set_topk_group(1);
  moe->set_routed_scaling_factor(2.5);
  moe->set_aux_loss_alpha(0.1);
  return c;
}

Tensor FromVector(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::Empty(shape);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

void ExpectClose(const std::string& name, const float* got, const float* want, int64_t n,
                 double rel) {
  double max_want = 1e-30, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_want = std::max(max_want, std::fabs(double{want[i]}));
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
  }
  EXPECT_LE(worst, rel * max_want)
      << name << ": worst difference " << worst << ", largest " << max_want;
}

// Sums `t` over the world, in place.
void SumOverWorld(const Tensor& t) { World().AllReduce(t, t, ReduceOp::kSum); }

TEST(MoeLayerExpertParallelTest, MatchesTheSingleRankLayer) {
  const ModelConfig c = MoeConfigForTest();
  const int ranks = World().size(), rank = World().rank();
  const int64_t batch = 2, seq = 4, rows = batch * seq, hidden = c.hidden_size();
  const float grad_scale = 0.25f;
  const std::string prefix = "model.layers.1.mlp";
  // Every rank holds the whole input; this rank routes rows [rank * rows, (rank + 1) * rows).
  const std::vector<float> x_all = testing::RandomVector(ranks * rows * hidden, 1);
  const std::vector<float> dy_all = testing::RandomVector(ranks * rows * hidden, 2);

  ParameterStore reference_store(11);
  MoeMlpLayer reference(reference_store, prefix, c);
  const Tensor x_ref = FromVector(x_all, {ranks * rows, hidden});
  const Tensor y_ref = reference.Forward(0, x_ref, ranks * batch, seq, grad_scale).Clone();
  const Tensor dx_ref = reference.Backward(0, FromVector(dy_all, x_ref.shape())).Clone();

  SelfCommunicator self(World().ranks()[rank], "tp");
  const LayerParallelism parallelism{
      .tp = &self, .kv_replicas = &self, .sequence_parallel = false, .ep = &World()};
  ParameterStore store(11);
  MoeMlpLayer layer(store, prefix, c, parallelism);
  const auto slice = [&](const std::vector<float>& all) {
    return std::vector<float>(all.begin() + rank * rows * hidden,
                              all.begin() + (rank + 1) * rows * hidden);
  };
  const Tensor x = FromVector(slice(x_all), {rows, hidden});
  const Tensor y = layer.Forward(0, x, batch, seq, grad_scale).Clone();
  const Tensor dx = layer.Backward(0, FromVector(slice(dy_all), {rows, hidden})).Clone();

  ExpectClose("output", y.f32(), y_ref.f32() + rank * rows * hidden, rows * hidden, kOutputRel);
  ExpectClose("input gradient", dx.f32(), dx_ref.f32() + rank * rows * hidden, rows * hidden,
              kGradRel);
  const int local_experts = 8 / ranks;
  int experts_seen = 0;
  for (Parameter& p : store.all()) {
    const Parameter* want = reference_store.Find(p.name);
    ASSERT_NE(want, nullptr) << p.name;
    ASSERT_EQ(p.value.shape(), want->value.shape()) << p.name;
    ExpectClose(p.name + " value", p.value.f32(), want->value.f32(), p.value.numel(), 0.0);
    if (p.name.find(".experts.") != std::string::npos) {
      ++experts_seen;
      ExpectClose(p.name + " gradient", p.grad.f32(), want->grad.f32(), p.grad.numel(), kGradRel);
    } else {
      SumOverWorld(p.grad);  // this rank's tokens' part
      ExpectClose(p.name + " gradient (summed)", p.grad.f32(), want->grad.f32(), p.grad.numel(),
                  kGradRel);
    }
  }
  EXPECT_EQ(experts_seen, 3 * local_experts);
  EXPECT_NE(
      store.Find(prefix + ".experts." + std::to_string(rank * local_experts) + ".gate_proj.weight"),
      nullptr);
  EXPECT_NEAR(SumOverRanks(World(), layer.aux_loss_sum()), reference.aux_loss_sum(),
              1e-6 * reference.aux_loss_sum());
  const Tensor& mine = layer.loads();
  std::vector<int32_t> loads(mine.data<int32_t>(), mine.data<int32_t>() + mine.numel());
  const Tensor loads_view = Tensor::View(loads.data(), {8}, DType::kI32);
  World().AllReduce(loads_view, loads_view, ReduceOp::kSum);
  const Tensor& want = reference.loads();
  EXPECT_EQ(loads, std::vector<int32_t>(want.data<int32_t>(), want.data<int32_t>() + want.numel()));
}

}  // namespace
}  // namespace tetra
