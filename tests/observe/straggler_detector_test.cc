// The straggler's arithmetic and its detector, with exact values: the median,
// the slowest rank and its ratio, and the consecutive-steps rule (named once
// when the run of slow steps reaches log.straggler_steps, again only after a
// step breaks the run).
#include "observe/straggler_detector.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

TEST(StragglerDetectorTest, MedianIsTheMiddleOrTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 2, 8}), 3);  // (2 + 4) / 2
  EXPECT_EQ(Median({1, 1, 1, 9}), 1);
}

TEST(StragglerDetectorTest, SlowestRankOverTheMedian) {
  // Rank 2 of four: 1.5 over the median (1 + 1) / 2 = 1.
  StragglerStats s = FindStraggler({1, 1, 1.5, 0.75});
  EXPECT_EQ(s.slowest_rank, 2);
  EXPECT_EQ(s.ratio, 1.5);
  // Two ranks: the median is their mean, 2 / ((2 + 0.5) / 2) = 1.6.
  s = FindStraggler({0.5, 2});
  EXPECT_EQ(s.slowest_rank, 1);
  EXPECT_EQ(s.ratio, 1.6);
  // Equally slow ranks: the lowest is named, and the ratio is 1.
  s = FindStraggler({0.25, 0.25, 0.25});
  EXPECT_EQ(s.slowest_rank, 0);
  EXPECT_EQ(s.ratio, 1);
  // Nothing measured: no evidence, ratio 1 (not inf or nan).
  s = FindStraggler({0, 0, 0});
  EXPECT_EQ(s.ratio, 1);
}

// The ranks Observe names over `steps`, by step (1-based), as "step:rank".
std::vector<std::string> Named(StragglerDetector detector,
                               const std::vector<StragglerStats>& steps) {
  std::vector<std::string> named;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (const std::optional<StragglerWarning> w = detector.Observe(steps[i])) {
      named.push_back(absl::StrCat(i + 1, ":", w->rank));
    }
  }
  return named;
}

TEST(StragglerDetectorTest, NamesARankAfterItsRunOfSlowStepsOnceUntilItRecovers) {
  const StragglerStats slow3{3, 2}, slow5{5, 2}, near3{3, 1.25}, at_threshold3{3, 1.3};
  // Rank 3 slow on steps 1-7: named at step 3, once.
  EXPECT_THAT(Named(StragglerDetector(1.3, 3), {slow3, slow3, slow3, slow3, slow3, slow3, slow3}),
              ::testing::ElementsAre("3:3"));
  // A step within the threshold (or exactly at it) breaks the run: named
  // again only after three more slow steps.
  EXPECT_THAT(Named(StragglerDetector(1.3, 3),
                    {slow3, slow3, near3, slow3, slow3, at_threshold3, slow3, slow3, slow3}),
              ::testing::ElementsAre("9:3"));
  EXPECT_THAT(Named(StragglerDetector(1.3, 3), {slow3, slow3, slow3, near3, slow3, slow3, slow3}),
              ::testing::ElementsAre("3:3", "7:3"));
  // Another rank the slowest breaks the run too.
  EXPECT_THAT(Named(StragglerDetector(1.3, 2), {slow3, slow5, slow3, slow3, slow5, slow5}),
              ::testing::ElementsAre("4:3", "6:5"));
  // One step suffices with straggler_steps 1; threshold 0 names nobody.
  EXPECT_THAT(Named(StragglerDetector(1.3, 1), {slow3, slow3, near3, slow5}),
              ::testing::ElementsAre("1:3", "4:5"));
  EXPECT_THAT(Named(StragglerDetector(0, 1), {slow3, slow3, slow5}), ::testing::IsEmpty());
}

TEST(StragglerDetectorTest, WarningCarriesTheSmallestRatioOfTheRun) {
  StragglerDetector detector(1.3, 3);
  EXPECT_FALSE(detector.Observe({1, 2.5}));
  EXPECT_FALSE(detector.Observe({1, 1.75}));
  const std::optional<StragglerWarning> w = detector.Observe({1, 2});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rank, 1);
  EXPECT_EQ(w->ratio, 1.75);
  EXPECT_EQ(w->steps, 3);
}

TEST(StragglerDetectorTest, MessageNamesRankHostRatioAndStepsWithAHint) {
  const std::string text = StragglerMessage({.rank = 3, .ratio = 1.8, .steps = 5}, "gpu-node-7");
  EXPECT_THAT(text, HasSubstr("tetra: warning: rank 3 (host gpu-node-7) is a straggler: its "
                              "compute took at least 1.8x the median rank's in each of the last 5 "
                              "steps"));
  EXPECT_THAT(text, HasSubstr("\nhint: "));
  EXPECT_THAT(text, HasSubstr("log.straggler_threshold 0"));
}

}  // namespace
}  // namespace tetra
