#include "launch/elastic_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tetra {
namespace {

using ::testing::HasSubstr;

const std::string kRecipe = std::string(TETRA_SOURCE_DIR) + "/configs/tiny_dense.textproto";

// Global batch 16 in micro-batches of 2: data 8, 4, 2 or 1 divide it, 3 does not.
TEST(ElasticPlanTest, DataParallelismShrinksToWhatTheRanksAndTheBatchAllow) {
  const std::vector<std::string> sets = {"train.micro_batch_size=2"};
  auto plan = PlanElastic(kRecipe, sets, 4, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->world, 4);
  EXPECT_EQ(plan->data, 4);
  EXPECT_EQ(plan->config.parallel().data(), 4);
  plan = PlanElastic(kRecipe, sets, 3, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->world, 2);
  EXPECT_EQ(plan->data, 2);
  EXPECT_EQ(plan->Override(), "parallel.data=2");
  EXPECT_EQ(plan->config.train().global_batch_size(), 16);
}

TEST(ElasticPlanTest, ModelParallelSizesAreKept) {
  const std::vector<std::string> sets = {"train.micro_batch_size=2", "parallel.tensor=2"};
  auto plan = PlanElastic(kRecipe, sets, 7, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->world, 4);  // tensor 2 x data 2: data 3 (6 ranks) does not divide 16 / 2
  EXPECT_EQ(plan->config.parallel().tensor(), 2);
  EXPECT_EQ(plan->data, 2);
}

TEST(ElasticPlanTest, TooFewRanksOrAnInvalidRecipeIsRefused) {
  const std::vector<std::string> sets = {"train.micro_batch_size=2"};
  EXPECT_THAT(PlanElastic(kRecipe, sets, 3, 3).status().message(), HasSubstr("global"));
  EXPECT_THAT(PlanElastic(kRecipe, {"train.micro_batch_size=2", "parallel.tensor=4"}, 3, 1)
                  .status()
                  .message(),
              HasSubstr("--min-np"));
}

}  // namespace
}  // namespace tetra
