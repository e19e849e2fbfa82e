#include "optimizer/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tetra {
namespace {

OptimizerConfig Schedule(double lr, double min_lr, int warmup) {
  OptimizerConfig o;
  o.set_lr(lr);
  o.set_min_lr(min_lr);
  o.set_warmup_steps(warmup);
  return o;
}

TEST(LrScheduleTest, WarmupThenCosineToMinAtLastStep) {
  OptimizerConfig o = Schedule(1.0, 0.1, 4);
  EXPECT_DOUBLE_EQ(LearningRate(o, 1, 14), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(o, 4, 14), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 5, 14), 1.0);   // first post-warmup step: lr
  EXPECT_DOUBLE_EQ(LearningRate(o, 14, 14), 0.1);  // last step: min_lr
  // Midway (step 5 + 9/2): 0.1 + 0.9 * 0.5 * (1 + cos(pi/2)) = 0.55.
  OptimizerConfig odd = Schedule(1.0, 0.1, 0);
  EXPECT_NEAR(LearningRate(odd, 6, 11), 0.55, 1e-15);
}

TEST(LrScheduleTest, ConstantWhenMinEqualsLr) {
  OptimizerConfig o = Schedule(3e-4, 3e-4, 0);
  for (int s = 1; s <= 10; ++s) EXPECT_DOUBLE_EQ(LearningRate(o, s, 10), 3e-4);
}

TEST(LrScheduleTest, SingleStepRunUsesLr) {
  EXPECT_DOUBLE_EQ(LearningRate(Schedule(2.0, 0.5, 0), 1, 1), 2.0);
}

}  // namespace
}  // namespace tetra
