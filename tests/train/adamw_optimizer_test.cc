#include "train/adamw_optimizer.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tetra {
namespace {

// Two parameters with gradients (3, 4) and (12): global norm 13.
struct Fixture {
  ParameterStore store{1};
  Fixture() {
    Parameter& w = store.Add("w", {1, 2}, Init::kOnes);
    Parameter& b = store.Add("b", {1}, Init::kOnes);
    w.grad.f32()[0] = 3;
    w.grad.f32()[1] = 4;
    b.grad.f32()[0] = 12;
  }
};

OptimizerConfig Config(double clip) {
  OptimizerConfig o;
  o.set_clip_grad(clip);
  return o;
}

TEST(AdamWOptimizerTest, GradNormIsTheGlobalL2Norm) {
  Fixture f;
  AdamWOptimizer optimizer(f.store, Config(1.0));
  EXPECT_DOUBLE_EQ(optimizer.GradNorm(), 13.0);
}

TEST(AdamWOptimizerTest, ClipsLikeTorchClipGradNorm) {
  Fixture f;
  AdamWOptimizer optimizer(f.store, Config(1.0));
  optimizer.ClipGradients(13.0);
  const float coefficient = static_cast<float>(1.0 / (13.0 + 1e-6));
  EXPECT_FLOAT_EQ(f.store.Find("w")->grad.f32()[1], 4 * coefficient);
  EXPECT_FLOAT_EQ(f.store.Find("b")->grad.f32()[0], 12 * coefficient);
}

TEST(AdamWOptimizerTest, NoClipBelowTheLimitOrWhenDisabled) {
  Fixture below;
  AdamWOptimizer(below.store, Config(20.0)).ClipGradients(13.0);
  EXPECT_EQ(below.store.Find("b")->grad.f32()[0], 12.0f);
  Fixture disabled;
  AdamWOptimizer(disabled.store, Config(0.0)).ClipGradients(13.0);
  EXPECT_EQ(disabled.store.Find("b")->grad.f32()[0], 12.0f);
}

TEST(AdamWOptimizerTest, DecaysMatricesOnly) {
  // lr 0.1, weight decay 0.5, step 1, zero gradients: the update is pure
  // decay, p *= 1 - lr * wd, on the matrix and not on the vector.
  Fixture f;
  f.store.ZeroGrads();
  OptimizerConfig o;
  o.set_weight_decay(0.5);
  AdamWOptimizer optimizer(f.store, o);
  optimizer.Step(0.1, 1);
  EXPECT_FLOAT_EQ(f.store.Find("w")->value.f32()[0], 0.95f);
  EXPECT_EQ(f.store.Find("b")->value.f32()[0], 1.0f);
}

}  // namespace
}  // namespace tetra
