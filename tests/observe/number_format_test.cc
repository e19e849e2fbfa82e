// The report's numbers, each worked out by hand: durations in s, ms, us or ns
// at three significant digits (rounding that reaches the next unit moves to
// it), quantities with thousands separators, percentages, counts with their
// noun's number, and axes at 1-2-5 steps with the unit on every label.
#include "observe/number_format.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;

TEST(NumberFormatTest, DurationsPickTheUnitAndKeepThreeDigits) {
  EXPECT_EQ(FormatDuration(0.00386408), "3.86 ms");
  EXPECT_EQ(FormatDuration(2.9681e-05), "29.7 us");
  EXPECT_EQ(FormatDuration(1.2), "1.20 s");
  EXPECT_EQ(FormatDuration(12.345), "12.3 s");
  EXPECT_EQ(FormatDuration(0.25), "250 ms");
  EXPECT_EQ(FormatDuration(0.0123456), "12.3 ms");
  EXPECT_EQ(FormatDuration(4.2e-7), "420 ns");
  EXPECT_EQ(FormatDuration(1e-3), "1.00 ms");
  EXPECT_EQ(FormatDuration(1e-6), "1.00 us");
  EXPECT_EQ(FormatDuration(0), "0 s");
  EXPECT_EQ(FormatDuration(-0.0025), "-2.50 ms");
}

TEST(NumberFormatTest, DurationsJustUnderAUnitRoundIntoIt) {
  // 999.96 us is 1000 us at three digits: 1.00 ms. 999.4 us stays in us.
  EXPECT_EQ(FormatDuration(999.96e-6), "1.00 ms");
  EXPECT_EQ(FormatDuration(999.4e-6), "999 us");
  EXPECT_EQ(FormatDuration(0.99996), "1.00 s");
  EXPECT_EQ(FormatDuration(0.9994), "999 ms");
  // Within a unit the rounding adds a digit before the point, not after it.
  EXPECT_EQ(FormatDuration(9.996e-3), "10.0 ms");
  EXPECT_EQ(FormatDuration(99.96e-3), "100 ms");
  EXPECT_EQ(FormatDuration(9.9949e-3), "9.99 ms");
}

TEST(NumberFormatTest, LongDurationsStayInSecondsWithSeparators) {
  EXPECT_EQ(FormatDuration(999.4), "999 s");
  EXPECT_EQ(FormatDuration(999.6), "1,000 s");
  EXPECT_EQ(FormatDuration(3600), "3,600 s");
  EXPECT_EQ(FormatDuration(123456.7), "123,457 s");
}

TEST(NumberFormatTest, NotFiniteIsNotANumberAPersonReads) {
  EXPECT_EQ(FormatDuration(std::nan("")), "n/a");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "n/a");
  EXPECT_EQ(FormatQuantity(std::nan("")), "n/a");
  EXPECT_EQ(FormatPercent(std::nan("")), "n/a");
}

TEST(NumberFormatTest, QuantitiesHaveThousandsSeparators) {
  EXPECT_EQ(FormatQuantity(241234.6), "241,235");
  EXPECT_EQ(FormatQuantity(1000), "1,000");
  EXPECT_EQ(FormatQuantity(999.6), "1,000");
  EXPECT_EQ(FormatQuantity(999.4), "999");
  EXPECT_EQ(FormatQuantity(100), "100");
  EXPECT_EQ(FormatQuantity(99.96), "100");
  EXPECT_EQ(FormatQuantity(12.345), "12.3");
  EXPECT_EQ(FormatQuantity(0.5), "0.500");
  EXPECT_EQ(FormatQuantity(0), "0");
  EXPECT_EQ(FormatQuantity(-1234567), "-1,234,567");
  // Huge rates keep every digit, never an exponent.
  EXPECT_EQ(FormatQuantity(1.5e12), "1,500,000,000,000");
  EXPECT_EQ(FormatQuantity(9.87654321e15), "9,876,543,210,000,000");
}

TEST(NumberFormatTest, PercentagesHaveOneDecimal) {
  EXPECT_EQ(FormatPercent(0.825105), "82.5%");
  EXPECT_EQ(FormatPercent(1), "100.0%");
  EXPECT_EQ(FormatPercent(1.0 / 13), "7.7%");
  EXPECT_EQ(FormatPercent(0.04), "4.0%");
  EXPECT_EQ(FormatPercent(0), "0.0%");
  EXPECT_EQ(FormatPercent(-0.0001), "0.0%");
  EXPECT_EQ(FormatPercent(0.99996), "100.0%");
  EXPECT_EQ(FormatPercent(1.25), "125.0%");
}

TEST(NumberFormatTest, IntegersAndCounts) {
  EXPECT_EQ(FormatInteger(0), "0");
  EXPECT_EQ(FormatInteger(999), "999");
  EXPECT_EQ(FormatInteger(1000), "1,000");
  EXPECT_EQ(FormatInteger(-1234567), "-1,234,567");
  EXPECT_EQ(CountOf(1, "rank"), "1 rank");
  EXPECT_EQ(CountOf(8, "rank"), "8 ranks");
  EXPECT_EQ(CountOf(0, "run"), "0 runs");
  EXPECT_EQ(CountOf(1, "batch", "batches"), "1 batch");
  EXPECT_EQ(CountOf(2, "batch", "batches"), "2 batches");
  EXPECT_EQ(CountOf(4096, "step"), "4,096 steps");
}

TEST(NumberFormatTest, FormatValueFollowsTheKind) {
  EXPECT_EQ(FormatValue(0.00386408, ValueKind::kSeconds), "3.86 ms");
  EXPECT_EQ(FormatValue(241234.6, ValueKind::kQuantity), "241,235");
  EXPECT_EQ(FormatValue(0.825105, ValueKind::kFraction), "82.5%");
}

TEST(NumberFormatTest, AxesStepByOneTwoFive) {
  // 2.41e5 / 5 = 48,200: the step is 50,000 and 5 of them reach 250,000.
  Axis a = NiceAxis(2.41e5, ValueKind::kQuantity);
  EXPECT_DOUBLE_EQ(a.step, 50000);
  EXPECT_EQ(a.intervals, 5);
  EXPECT_THAT(a.labels, ElementsAre("0", "50,000", "100,000", "150,000", "200,000", "250,000"));
  // 3.19 ms / 5 = 0.638 ms: step 1 ms, 4 of them; every label in ms.
  a = NiceAxis(0.00319, ValueKind::kSeconds);
  EXPECT_DOUBLE_EQ(a.step, 1e-3);
  EXPECT_EQ(a.intervals, 4);
  EXPECT_THAT(a.labels, ElementsAre("0 ms", "1 ms", "2 ms", "3 ms", "4 ms"));
  // 0.825 / 5 = 0.165: step 0.2 (20%), 5 of them.
  a = NiceAxis(0.825105, ValueKind::kFraction);
  EXPECT_DOUBLE_EQ(a.step, 0.2);
  EXPECT_EQ(a.intervals, 5);
  EXPECT_THAT(a.labels, ElementsAre("0%", "20%", "40%", "60%", "80%", "100%"));
  // 1.01 / 5 = 0.202: step 0.5, 3 of them reach 1.5.
  a = NiceAxis(1.01, ValueKind::kFraction);
  EXPECT_DOUBLE_EQ(a.step, 0.5);
  EXPECT_THAT(a.labels, ElementsAre("0%", "50%", "100%", "150%"));
  // Steps under one unit show the decimals they need, the same on every tick.
  a = NiceAxis(0.0012, ValueKind::kSeconds);  // 0.24 ms -> step 0.5 ms
  EXPECT_THAT(a.labels, ElementsAre("0.0 ms", "0.5 ms", "1.0 ms", "1.5 ms"));
  a = NiceAxis(0.34, ValueKind::kFraction);  // 0.068 -> step 0.1
  EXPECT_THAT(a.labels, ElementsAre("0%", "10%", "20%", "30%", "40%"));
  a = NiceAxis(0.034, ValueKind::kFraction);  // 0.0068 -> step 0.01
  EXPECT_THAT(a.labels, ElementsAre("0%", "1%", "2%", "3%", "4%"));
  a = NiceAxis(0.011, ValueKind::kFraction);  // 0.0022 -> step 0.005
  EXPECT_THAT(a.labels, ElementsAre("0.0%", "0.5%", "1.0%", "1.5%"));
}

TEST(NumberFormatTest, AxesAtUnitBoundariesAndDegenerateRanges) {
  // A top of exactly 1 ms is drawn in ms: 0.2 ms steps.
  Axis a = NiceAxis(0.00099, ValueKind::kSeconds);
  EXPECT_THAT(a.labels, ElementsAre("0.0 ms", "0.2 ms", "0.4 ms", "0.6 ms", "0.8 ms", "1.0 ms"));
  // Under 1 ms at the top: us.
  a = NiceAxis(29.7e-6, ValueKind::kSeconds);  // 5.94 us -> step 10 us
  EXPECT_THAT(a.labels, ElementsAre("0 us", "10 us", "20 us", "30 us"));
  // Seconds over 1000 keep separators.
  a = NiceAxis(4321, ValueKind::kSeconds);  // 864.2 -> step 1000 s
  EXPECT_THAT(a.labels, ElementsAre("0 s", "1,000 s", "2,000 s", "3,000 s", "4,000 s", "5,000 s"));
  // A value that is itself a tick tops the axis there.
  a = NiceAxis(1, ValueKind::kFraction);
  EXPECT_THAT(a.labels, ElementsAre("0%", "20%", "40%", "60%", "80%", "100%"));
  // One point at 0, or nothing finite: an axis to 1.
  for (double nothing : {0.0, -3.0, std::nan("")}) {
    a = NiceAxis(nothing, ValueKind::kQuantity);
    EXPECT_DOUBLE_EQ(a.top(), 1) << nothing;
    EXPECT_THAT(a.labels, ElementsAre("0.0", "0.2", "0.4", "0.6", "0.8", "1.0")) << nothing;
  }
  // Huge rates: 1.5e12 / 5 = 3e11 -> step 5e11.
  a = NiceAxis(1.5e12, ValueKind::kQuantity);
  EXPECT_EQ(a.intervals, 3);
  EXPECT_EQ(a.labels.back(), "1,500,000,000,000");
  // Fewer intervals asked for: 2.41e5 / 2 = 120,500 -> step 200,000.
  a = NiceAxis(2.41e5, ValueKind::kQuantity, 2);
  EXPECT_THAT(a.labels, ElementsAre("0", "200,000", "400,000"));
}

}  // namespace
}  // namespace tetra
