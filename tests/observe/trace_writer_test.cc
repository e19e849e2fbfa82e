#include "observe/trace_writer.h"

#include "gtest/gtest.h"

namespace tetra {
namespace {

TEST(TraceWriterTest, StepRangesParseAndBadOnesSayWhy) {
  auto range = ParseTraceSteps("5-7", 10);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->first, 5);
  EXPECT_EQ(range->last, 7);
  EXPECT_TRUE(range->Contains(6));
  EXPECT_FALSE(range->Contains(8));
  range = ParseTraceSteps("3", 10);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->first, 3);
  EXPECT_EQ(range->last, 3);
  // Default: steps 2-4, cut to short runs.
  EXPECT_EQ(ParseTraceSteps("", 100)->first, 2);
  EXPECT_EQ(ParseTraceSteps("", 100)->last, 4);
  EXPECT_EQ(ParseTraceSteps("", 1)->first, 1);
  EXPECT_EQ(ParseTraceSteps("", 3)->last, 3);
  for (const char* bad : {"0-2", "7-5", "5-11", "a", "1-2-3", "-3"}) {
    const absl::Status status = ParseTraceSteps(bad, 10).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("within 1-10"), absl::string_view::npos) << status;
  }
}

TEST(TraceWriterTest, EventsCarryPidTrackAndMicroseconds) {
  const std::vector<ProfileEvent> events = {{SpanKind::kCommTp, "all_reduce tp", 12.5, 3.25, -1},
                                            {SpanKind::kStep, "step", 10, 100, 4},
                                            {SpanKind::kForward, "forward", 11, 20, 0}};
  const std::string json = TraceEventsJson(events, 3, RankCoords{.tp = 1, .pp = 1});
  EXPECT_NE(json.find(R"j("args": {"name": "rank 3 (tp 1, pp 1, dp 0, ep 0)"})j"),
            std::string::npos)
      << json;
  EXPECT_NE(
      json.find(
          R"j({"name": "thread_name", "ph": "M", "pid": 3, "tid": 1, "args": {"name": "tp comm"}})j"),
      std::string::npos);
  // Compute track first (the step before the forward it holds), then tp.
  const size_t step = json.find(
      R"j("name": "step", "cat": "compute", "ph": "X", "ts": 10.000, "dur": 100.000, "pid": 3, "tid": 0, "args": {"step": 4})j");
  const size_t forward = json.find(
      R"j("name": "forward", "cat": "compute", "ph": "X", "ts": 11.000, "dur": 20.000, "pid": 3, "tid": 0, "args": {"micro_batch": 0})j");
  const size_t reduce = json.find(
      R"j("name": "all_reduce tp", "cat": "tp comm", "ph": "X", "ts": 12.500, "dur": 3.250, "pid": 3, "tid": 1})j");
  ASSERT_NE(step, std::string::npos) << json;
  ASSERT_NE(forward, std::string::npos) << json;
  ASSERT_NE(reduce, std::string::npos) << json;
  EXPECT_LT(step, forward);
  EXPECT_LT(forward, reduce);
}

}  // namespace
}  // namespace tetra
