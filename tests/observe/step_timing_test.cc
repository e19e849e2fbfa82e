#include "observe/step_timing.h"

#include <chrono>

#include "comm/self_communicator.h"
#include "core/profiler.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using std::chrono::microseconds;

// Tolerances. Spans are built from explicit time points, whole microseconds:
// their seconds are exact up to the decimal -> binary rounding of 1e-6 steps.
constexpr double kTolerance = 1e-12;

TEST(StepTimingTest, ProfilerTotalsEachKindAndRecordsOnlyWhenAsked) {
  Profiler& p = Profiler::Get();
  const auto t0 = std::chrono::steady_clock::now();
  p.BeginStep(/*record=*/false);
  p.Add(SpanKind::kForward, nullptr, t0, t0 + microseconds(1500), 0);
  p.Add(SpanKind::kForward, nullptr, t0, t0 + microseconds(500), 1);
  p.Add(SpanKind::kCommTp, "all_reduce tp", t0, t0 + microseconds(250), -1);
  EXPECT_TRUE(p.TakeEvents().empty());
  const StepTiming t = StepTiming::FromProfiler();
  EXPECT_NEAR(t.fwd_s, 0.002, kTolerance);
  EXPECT_NEAR(t.comm_tp_s, 0.00025, kTolerance);
  EXPECT_EQ(t.bwd_s, 0);
  EXPECT_GT(t.peak_memory_bytes, 1 << 20);  // a process holds at least a MiB

  p.BeginStep(/*record=*/true);
  EXPECT_EQ(StepTiming::FromProfiler().fwd_s, 0);  // totals restart each step
  p.Add(SpanKind::kBackward, nullptr, t0, t0 + microseconds(40), 3);
  const std::vector<ProfileEvent> events = p.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_STREQ(events[0].name, "backward");
  EXPECT_NEAR(events[0].duration_us, 40, 1e-6);
  EXPECT_EQ(events[0].arg, 3);
  EXPECT_EQ(SpanTrack(SpanKind::kCommPp), 3);
  EXPECT_STREQ(TrackName(SpanTrack(SpanKind::kCommDp)), "dp comm");
  p.BeginStep(false);
}

TEST(StepTimingTest, SingleRankMetricsCarryItsOwnBreakdown) {
  SelfCommunicator world;
  StepTiming local;
  local.fwd_s = 0.5;
  local.bwd_s = 1.0;
  local.optimizer_s = 0.25;
  local.comm_tp_s = 0.125;
  local.peak_memory_bytes = 4096;
  StepMetrics m;
  AddStepTiming(world, MeshShape{}, local, m);
  EXPECT_EQ(*m.fwd_s, 0.5);
  EXPECT_EQ(*m.bwd_s, 1.0);
  EXPECT_EQ(*m.optimizer_s, 0.25);
  EXPECT_EQ(*m.comm_exposed_s, 0.125);
  EXPECT_EQ(*m.peak_memory_bytes, 4096);
  // Per-group fields only for groups of more than one rank.
  EXPECT_FALSE(m.comm_exposed_s_tp || m.comm_exposed_s_dp || m.comm_exposed_s_pp ||
               m.comm_exposed_s_ep);
  // One rank has nobody to be slower than.
  EXPECT_FALSE(m.slowest_rank || m.straggler_ratio);
  const std::string json = MetricsJson(m);
  EXPECT_NE(json.find("\"peak_memory_bytes\": 4096"), std::string::npos) << json;
  EXPECT_NE(
      json.find("\"fwd_s\": 0.5, \"bwd_s\": 1, \"optimizer_s\": 0.25, \"comm_exposed_s\": 0.125"),
      std::string::npos)
      << json;
}

}  // namespace
}  // namespace tetra
