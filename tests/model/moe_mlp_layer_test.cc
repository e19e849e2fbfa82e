// The mixture-of-experts MLP on one rank: finite-difference gradients of the
// layer (input, router gate, routed and shared experts, through the combine
// weights and the balance loss) and of a whole MoE model's objective; its
// DeepSeek-V3 parameter names; the correction bias as a buffer.
#include "model/moe_mlp_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "model/language_model.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

using testing::ExpectGradientMatches;
using testing::GradCheckOptions;

// Tolerances: fp32 forwards differenced with h = 1e-2 (as layers_test.cc):
// about 1e-3 relative error; a wrong term is off by O(1). Routing is
// piecewise constant: these seeds leave no choice within h of a tie.
const GradCheckOptions kLayerTolerance{/*step=*/1e-2, /*rel_tol=*/2e-2, /*abs_tol=*/2e-4,
                                       /*max_checks=*/24};
// The whole model: a step in an early layer moves every later router's
// inputs, so h is 1e-3 to stay clear of choice flips (a flip shows as an
// O(1 / h) spike); fp32 rounding of the O(10) objective is then about 1e-3.
const GradCheckOptions kModelTolerance{/*step=*/1e-3, /*rel_tol=*/3e-2, /*abs_tol=*/3e-3,
                                       /*max_checks=*/12};

ModelConfig TinyMoeConfig() {
  ModelConfig c;
  c.set_vocab_size(11);
  c.set_hidden_size(8);
  c.set_num_hidden_layers(2);
  c.set_num_attention_heads(2);
  c.set_intermediate_size(12);
  c.set_initializer_range(0.5);
  return testing::WithTinyMoe(c, /*aux_loss_alpha=*/0.3);
}

TEST(MoeMlpLayerTest, Gradients) {
  const ModelConfig c = TinyMoeConfig();
  ParameterStore store(3);
  MoeMlpLayer layer(store, "model.layers.1.mlp", c);
  const int64_t batch = 2, seq = 3, n = batch * seq;
  const float grad_scale = 0.5f;
  Tensor x = Tensor::Empty({n, c.hidden_size()});
  const std::vector<float> xs = testing::RandomVector(x.numel(), 1);
  std::memcpy(x.raw(), xs.data(), x.nbytes());
  const std::vector<float> probe = testing::RandomVector(x.numel(), 2);
  // The objective: sum(y * probe) + the balance term weighted as in Forward.
  auto loss = [&] {
    layer.ResetStats();
    const Tensor y = layer.Forward(0, x, batch, seq, grad_scale);
    return testing::ProbeLoss(y.f32(), probe) + grad_scale * seq * layer.aux_loss_sum();
  };
  loss();
  EXPECT_GT(layer.aux_loss_sum(), 0);
  Tensor dy = Tensor::Empty(x.shape());
  std::memcpy(dy.raw(), probe.data(), dy.nbytes());
  const Tensor dx = layer.Backward(0, dy).Clone();
  ExpectGradientMatches("x", x.f32(), x.numel(), dx.f32(), loss, kLayerTolerance);
  for (Parameter& p : store.all()) {
    if (!p.trainable) continue;
    ExpectGradientMatches(p.name, p.value.f32(), p.value.numel(), p.grad.f32(), loss,
                          kLayerTolerance);
  }
}

// Under a bf16 placement the layer computes as the device does: the router in
// fp32 (its fp32 weight, the input cast once), the experts on their bf16
// compute copies, every GEMM on inputs of one dtype (the op API refuses a
// mix, as cuBLASLt does: this test died there when the router took bf16
// activations with its fp32 weight). Output and gradients stay within bf16
// round-off of the fp32 layer's: weights and activations rounded to 2^-8
// relative a few times over, on O(1) values; no choice of these seeds lies
// that close to a tie, so routing agrees.
TEST(MoeMlpLayerTest, Bf16ComputesAsTheDeviceDoes) {
  constexpr double kBf16Tolerance = 3e-2;  // relative to the largest value
  const ModelConfig c = TinyMoeConfig();
  const int64_t batch = 2, seq = 3, n = batch * seq;
  const std::vector<float> xs = testing::RandomVector(n * c.hidden_size(), 1);
  const std::vector<float> probe = testing::RandomVector(n * c.hidden_size(), 2);
  auto as_f32 = [](const Tensor& t) {
    Tensor f32 = Tensor::Empty(t.shape());
    ops::Cast(t, f32);
    return std::vector<float>(f32.f32(), f32.f32() + f32.numel());
  };
  auto run = [&](DType dtype) {
    const ScopedPlacement placement({DeviceType::kCPU, dtype});
    ParameterStore store(3);
    MoeMlpLayer layer(store, "model.layers.1.mlp", c);
    store.Pack();
    Tensor x32 = Tensor::Empty({n, c.hidden_size()}), dy32 = Tensor::Empty({n, c.hidden_size()});
    std::memcpy(x32.raw(), xs.data(), x32.nbytes());
    std::memcpy(dy32.raw(), probe.data(), dy32.nbytes());
    Tensor x = Tensor::Empty(x32.shape(), dtype), dy = Tensor::Empty(dy32.shape(), dtype);
    ops::Cast(x32, x);
    ops::Cast(dy32, dy);
    std::vector<std::vector<float>> got = {as_f32(layer.Forward(0, x, batch, seq, 0.5f)),
                                           as_f32(layer.Backward(0, dy))};
    for (const char* name :
         {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.0.gate_proj.weight",
          "model.layers.1.mlp.shared_experts.down_proj.weight"}) {
      got.push_back(as_f32(store.Find(name)->grad));
    }
    return got;
  };
  const std::vector<std::vector<float>> f32 = run(DType::kF32), bf16 = run(DType::kBF16);
  const char* names[] = {"y", "dx", "router gate grad", "expert 0 gate_proj grad",
                         "shared down_proj grad"};
  for (size_t i = 0; i < f32.size(); ++i) {
    double largest = 0, worst = 0;
    for (size_t j = 0; j < f32[i].size(); ++j) {
      largest = std::max(largest, std::abs(static_cast<double>(f32[i][j])));
      worst = std::max(worst, std::abs(static_cast<double>(bf16[i][j]) - f32[i][j]));
    }
    EXPECT_GT(largest, 0) << names[i];
    EXPECT_LE(worst, kBf16Tolerance * largest) << names[i];
    EXPECT_GT(worst, 0) << names[i] << ": bf16 equals fp32 exactly, so bf16 did not run";
  }
}

TEST(MoeMlpLayerTest, DeepSeekV3NamesAndABiasBuffer) {
  LanguageModel model(TinyMoeConfig(), 5);
  std::vector<std::string> mlp_names;
  for (const Parameter& p : model.parameters().all()) {
    if (p.name.find(".mlp.") != std::string::npos) mlp_names.push_back(p.name);
  }
  const std::string l0 = "model.layers.0.mlp.", l1 = "model.layers.1.mlp.";
  std::vector<std::string> expected = {l0 + "gate_proj.weight", l0 + "up_proj.weight",
                                       l0 + "down_proj.weight", l1 + "gate.weight",
                                       l1 + "gate.e_score_correction_bias"};
  for (int e = 0; e < 4; ++e) {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      expected.push_back(l1 + "experts." + std::to_string(e) + "." + proj + ".weight");
    }
  }
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
    expected.push_back(l1 + "shared_experts." + proj + ".weight");
  }
  EXPECT_EQ(mlp_names, expected);
  const Parameter* bias = model.parameters().Find(l1 + "gate.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_FALSE(bias->trainable);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(bias->value.f32()[e], 0.0f);
  EXPECT_EQ(model.parameters().Find(l1 + "shared_experts.gate_proj.weight")->value.dim(0), 6);
  ASSERT_EQ(model.moe_layers().size(), 1u);
}

// The whole model: cross-entropy sum plus seq x the balance terms (grad_scale 1).
TEST(MoeMlpLayerTest, ModelObjectiveGradients) {
  LanguageModel model(TinyMoeConfig(), 5);
  // Move the bias off zero so it steers the choice in the test too.
  Parameter* bias = model.parameters().Find("model.layers.1.mlp.gate.e_score_correction_bias");
  for (int e = 0; e < 4; ++e) bias->value.f32()[e] = 0.05f * (e - 1.5f);
  const int64_t batch = 2, seq = 5;
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i) {
    inputs[i] = static_cast<int32_t>((i * 7 + 3) % 11);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % 11);
  }
  auto objective = [&] {
    model.moe_layers()[0]->ResetStats();
    const double ce = testing::ForwardLoss(model, inputs.data(), targets.data(), batch, seq);
    return ce + seq * model.moe_layers()[0]->aux_loss_sum();
  };
  model.parameters().ZeroGrads();
  testing::ForwardBackward(model, inputs.data(), targets.data(), batch, seq, 1.0f);
  EXPECT_EQ(bias->grad.f32()[0], 0.0f);
  for (Parameter& p : model.parameters().all()) {
    if (!p.trainable) continue;
    Tensor grad = p.grad.Clone();
    ExpectGradientMatches(p.name, p.value.f32(), p.value.numel(), grad.f32(), objective,
                          kModelTolerance);
  }
}

}  // namespace
}  // namespace tetra
