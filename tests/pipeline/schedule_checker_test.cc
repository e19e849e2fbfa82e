// The schedule checker on every generated table of pp 1..8, micro-batches
// 1..16 and virtual stages 1..4 where the kind allows them, every rank: the
// tables pass, the bubble equals the textbook formula and the peak live
// activations the kind's closed form. Then a timeline worked out by hand, and
// broken tables (the classic blocking 1F1B deadlock, a missing send, a
// backward before its forward, ...) that the checker must reject, and the
// timeline of executed orders (receives where the rank waits, a late send).
//
// No tolerances: times are whole units, so bubbles compare as exact fractions
// (idle x denominator == step time x numerator).
#include "pipeline/schedule_checker.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/schedule.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using T = ActionType;

constexpr ScheduleKind kKinds[] = {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved};

// Whether the kind runs (p, m, v), stated apart from ValidateScheduleSpec.
bool KindAllows(ScheduleKind kind, int p, int m, int v) {
  if (kind != ScheduleKind::kInterleaved || v == 1) return v == 1;
  return p >= 2 && m % p == 0;
}

// Peak live activations (micro-batch chunks) of `rank`: all of them for GPipe,
// warm-up forwards + the one in flight for 1F1B (p - r - 1 + 1) and Megatron's
// interleaved schedule (2 (p - r - 1) + (v - 1) p + 1), never more than m v.
int ExpectedPeak(ScheduleKind kind, int p, int m, int v, int rank) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return m;
    case ScheduleKind::kOneFOneB:
      return std::min(p - rank, m);
    case ScheduleKind::kInterleaved:
      return std::min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v);
  }
  return -1;
}

TEST(ScheduleCheckerTest, EveryGeneratedScheduleIsSoundWithTheTextbookBubble) {
  int checked = 0;
  for (ScheduleKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          const ScheduleSpec spec{.kind = kind, .stages = p, .micro_batches = m, .virtual_stages = v};
          const std::string name = std::string(ScheduleKindName(kind)) + " p " + std::to_string(p) + " m " +
                                   std::to_string(m) + " v " + std::to_string(v);
          absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
          ASSERT_EQ(tables.ok(), KindAllows(kind, p, m, v)) << name << ": " << tables.status();
          if (!tables.ok()) continue;
          absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
          ASSERT_TRUE(report.ok()) << name << ": " << report.status();
          // Each rank computes v m forwards and backwards; the step takes
          // (v m + p - 1) (t_f + t_b): bubble (p - 1) / (v m + p - 1) everywhere.
          const int per_chunk = kForwardTime + kBackwardTime;
          EXPECT_EQ(report->step_time, (v * m + p - 1) * per_chunk) << name;
          for (int rank = 0; rank < p; ++rank) {
            const RankReport& r = report->ranks[rank];
            EXPECT_EQ(r.busy_time, v * m * per_chunk) << name << " rank " << rank;
            EXPECT_EQ(int64_t{r.idle_time} * (v * m + p - 1), int64_t{report->step_time} * (p - 1))
                << name << " rank " << rank;
            EXPECT_EQ(r.peak_activations, ExpectedPeak(kind, p, m, v, rank)) << name << " rank " << rank;
            EXPECT_EQ(r.timeline.size(), static_cast<size_t>(2 * m * v)) << name << " rank " << rank;
            if (v == 1) {
              EXPECT_EQ(r.peak_activations_per_chunk, std::vector<int>{r.peak_activations}) << name;
            }
          }
          EXPECT_DOUBLE_EQ(report->BubbleFraction(), static_cast<double>(p - 1) / (v * m + p - 1)) << name;
          ++checked;
        }
      }
    }
  }
  // GPipe and 1F1B: 8 x 16 each; interleaved v 1: 8 x 16, v 2..4: p 2..8 with p | m.
  int interleaved = 0;
  for (int p = 2; p <= 8; ++p) interleaved += 3 * (16 / p);
  EXPECT_EQ(checked, 3 * 8 * 16 + interleaved);
}

TEST(ScheduleCheckerTest, IdealBubbleFormula) {
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kOneFOneB, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kGPipe, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kInterleaved, 4, 8, 2}), 3.0 / 19);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kOneFOneB, 1, 5, 1}), 0.0);
}

TEST(ScheduleCheckerTest, TimelineWorkedByHand) {
  // 1F1B, p 2, m 2, forward 1 unit, backward 2: rank 0 F0 [0,1) F1 [1,2) and
  // waits for rank 1's B0 [2,4) to run B0 [4,6); rank 1's F1 [4,5), B1 [5,7);
  // rank 0's B1 [7,9). Step 9, rank 0 idle 3: 3 / 9 = (p - 1) / (m + p - 1).
  const ScheduleSpec spec{.kind = ScheduleKind::kOneFOneB, .stages = 2, .micro_batches = 2};
  absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
  ASSERT_TRUE(tables.ok()) << tables.status();
  absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
  ASSERT_TRUE(report.ok()) << report.status();
  auto starts_and_ends = [](const RankReport& rank) {
    std::vector<std::pair<int, int>> out;
    for (const TimedAction& t : rank.timeline) out.emplace_back(t.start, t.end);
    return out;
  };
  using Spans = std::vector<std::pair<int, int>>;
  EXPECT_EQ(starts_and_ends(report->ranks[0]), (Spans{{0, 1}, {1, 2}, {4, 6}, {7, 9}}));
  EXPECT_EQ(starts_and_ends(report->ranks[1]), (Spans{{1, 2}, {2, 4}, {4, 5}, {5, 7}}));
  EXPECT_EQ(report->step_time, 9);
  EXPECT_EQ(report->ranks[0].idle_time, 3);
  EXPECT_EQ(report->ranks[1].idle_time, 3);
  EXPECT_EQ(report->ranks[0].peak_activations, 2);
  EXPECT_EQ(report->ranks[1].peak_activations, 1);
}

// The checker's error for `tables`, which must contain `message`.
void ExpectRejected(const ScheduleSpec& spec, const std::vector<std::vector<Action>>& tables,
                    const std::string& message) {
  absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, tables);
  ASSERT_FALSE(report.ok()) << message;
  EXPECT_THAT(report.status().message(), HasSubstr(message));
}

constexpr ScheduleSpec kTwoByTwo{.kind = ScheduleKind::kOneFOneB, .stages = 2, .micro_batches = 2};

TEST(ScheduleCheckerTest, BlockingOneFOneBWithSendAfterComputeDeadlocks) {
  // Each computation followed by its send, each preceded by its receive:
  // rank 0 sends F1's activation while rank 1 sends B0's gradient, both block.
  const std::vector<std::vector<Action>> tables = {
      {{T::kForward, 0, 0, -1},
       {T::kSendActivation, 0, 0, 1},
       {T::kForward, 1, 0, -1},
       {T::kSendActivation, 1, 0, 1},
       {T::kRecvGradient, 0, 0, 1},
       {T::kBackward, 0, 0, -1},
       {T::kRecvGradient, 1, 0, 1},
       {T::kBackward, 1, 0, -1}},
      {{T::kRecvActivation, 0, 0, 0},
       {T::kForward, 0, 0, -1},
       {T::kBackward, 0, 0, -1},
       {T::kSendGradient, 0, 0, 0},
       {T::kRecvActivation, 1, 0, 0},
       {T::kForward, 1, 0, -1},
       {T::kBackward, 1, 0, -1},
       {T::kSendGradient, 1, 0, 0}}};
  ExpectRejected(kTwoByTwo, tables,
                 "deadlock with blocking sends and receives: rank 0 waits at action 3 (send activation of "
                 "micro-batch 1 chunk 0 to rank 1); rank 1 waits at action 3 (send gradient of micro-batch 0 "
                 "chunk 0 to rank 0)");
}

TEST(ScheduleCheckerTest, BrokenTablesAreRejected) {
  absl::StatusOr<std::vector<std::vector<Action>>> good = BuildAllSchedules(kTwoByTwo);
  ASSERT_TRUE(good.ok()) << good.status();
  // Rank 0: F0 SA0 F1 SA1 RG0 B0 RG1 B1; rank 1: RA0 F0 RA1 B0 SG0 F1 B1 SG1.
  ASSERT_EQ((*good)[0][3], (Action{T::kSendActivation, 1, 0, 1}));
  ASSERT_TRUE(CheckSchedule(kTwoByTwo, *good).ok());

  std::vector<std::vector<Action>> tables = *good;
  tables[0].erase(tables[0].begin() + 3);  // rank 0 never sends F1's activation
  ExpectRejected(kTwoByTwo, tables,
                 "rank 1 action 2 (receive activation of micro-batch 1 chunk 0 from rank 0): rank 0 never sends it");

  tables = *good;
  tables[1].erase(tables[1].begin() + 2);  // rank 1 runs F1 without its input
  ExpectRejected(kTwoByTwo, tables,
                 "rank 1 action 4 (forward of micro-batch 1 chunk 0): comes before the receive or computation it "
                 "depends on");

  tables = *good;
  tables[0][1].peer = 0;  // rank 0 sends to itself
  ExpectRejected(kTwoByTwo, tables, "rank 0 action 1 (send activation of micro-batch 0 chunk 0 to rank 0): the "
                                    "neighbouring virtual stage 1 is on rank 1");

  tables = *good;
  tables[0].push_back({T::kRecvActivation, 0, 0, 1});  // the first stage has no input to receive
  ExpectRejected(kTwoByTwo, tables, "virtual stage 0 of 2 has no such neighbour");

  tables = *good;
  tables[1].push_back({T::kBackward, 1, 0, -1});
  ExpectRejected(kTwoByTwo, tables, "rank 1 action 8 (backward of micro-batch 1 chunk 0): appears twice");

  tables = *good;
  tables[1][0].micro_batch = 2;
  ExpectRejected(kTwoByTwo, tables, "outside 2 micro-batches x 1 chunks");

  ExpectRejected(kTwoByTwo, {(*good)[0]}, "1 tables for 2 pipeline ranks");

  const ScheduleSpec one{.kind = ScheduleKind::kGPipe, .stages = 1, .micro_batches = 2};
  ExpectRejected(one, {{{T::kBackward, 0, 0, -1}, {T::kForward, 0, 0, -1}}},
                 "rank 0 action 0 (backward of micro-batch 0 chunk 0): comes before its forward");
  ExpectRejected(one, {{{T::kForward, 0, 0, -1}, {T::kForward, 1, 0, -1}, {T::kBackward, 0, 0, -1}}},
                 "rank 0 never runs the backward of micro-batch 1 chunk 0");
}

// SimulateTimeline on what an executor does: receives stand where the rank
// waits for their data, later than the table posts them.
TEST(SimulateTimelineTest, ReceivesWhereTheRankWaitsKeepTheTablesTimeline) {
  absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(kTwoByTwo);
  ASSERT_TRUE(tables.ok()) << tables.status();
  absl::StatusOr<ScheduleReport> table_report = CheckSchedule(kTwoByTwo, *tables);
  ASSERT_TRUE(table_report.ok()) << table_report.status();
  // Rank 1's table posts RA1 before B0; it waits for it just before F1.
  std::vector<std::vector<Action>> executed = *tables;
  ASSERT_EQ(executed[1][2], (Action{T::kRecvActivation, 1, 0, 0}));
  executed[1] = {executed[1][0], executed[1][1], executed[1][3], executed[1][4],
                 executed[1][2], executed[1][5], executed[1][6], executed[1][7]};
  absl::StatusOr<ScheduleReport> report = SimulateTimeline(kTwoByTwo, executed);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->step_time, table_report->step_time);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(report->ranks[rank].idle_time, table_report->ranks[rank].idle_time) << rank;
    EXPECT_EQ(report->ranks[rank].peak_activations, table_report->ranks[rank].peak_activations) << rank;
  }
  EXPECT_EQ(report->BubbleFraction(), IdealBubbleFraction(kTwoByTwo));
}

TEST(SimulateTimelineTest, ALateSendDelaysItsReceiver) {
  // Rank 1 posts B0's gradient after F1 [4,5) instead of at 4: rank 0's B0
  // starts at 5, not 4 (TimelineWorkedByHand has the table's timeline).
  std::vector<std::vector<Action>> executed = {
      {{T::kForward, 0, 0, -1},
       {T::kSendActivation, 0, 0, 1},
       {T::kForward, 1, 0, -1},
       {T::kSendActivation, 1, 0, 1},
       {T::kRecvGradient, 0, 0, 1},
       {T::kBackward, 0, 0, -1},
       {T::kRecvGradient, 1, 0, 1},
       {T::kBackward, 1, 0, -1}},
      {{T::kRecvActivation, 0, 0, 0},
       {T::kForward, 0, 0, -1},
       {T::kBackward, 0, 0, -1},
       {T::kRecvActivation, 1, 0, 0},
       {T::kForward, 1, 0, -1},
       {T::kSendGradient, 0, 0, 0},
       {T::kBackward, 1, 0, -1},
       {T::kSendGradient, 1, 0, 0}}};
  absl::StatusOr<ScheduleReport> report = SimulateTimeline(kTwoByTwo, executed);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->ranks[0].timeline.size(), 4u);
  EXPECT_EQ(report->ranks[0].timeline[2].start, 5);
  EXPECT_EQ(report->ranks[0].idle_time, 3);  // B1 [7, 9) was the critical path anyway

  // Rank 0 waiting for B0's gradient before sending F0's activation stalls both.
  executed[0] = {{T::kForward, 0, 0, -1}, {T::kForward, 1, 0, -1},      {T::kRecvGradient, 0, 0, 1},
                 {T::kBackward, 0, 0, -1}, {T::kSendActivation, 0, 0, 1}, {T::kSendActivation, 1, 0, 1},
                 {T::kRecvGradient, 1, 0, 1}, {T::kBackward, 1, 0, -1}};
  report = SimulateTimeline(kTwoByTwo, executed);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(),
              HasSubstr("stalled: rank 0 waits at action 2 (receive gradient of micro-batch 0 chunk 0 from rank "
                        "1); rank 1 waits at action 0 (receive activation of micro-batch 0 chunk 0 from rank 0)"));
  executed[0][0].chunk = 1;
  report = SimulateTimeline(kTwoByTwo, executed);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(), HasSubstr("outside 2 micro-batches x 1 chunks"));
}

TEST(ScheduleCheckerTest, ActivationsAboveTheBoundAreRejected) {
  // GPipe's table holds all 4 micro-batches on rank 0; 1F1B allows p - r = 2.
  absl::StatusOr<std::vector<std::vector<Action>>> gpipe =
      BuildAllSchedules({.kind = ScheduleKind::kGPipe, .stages = 2, .micro_batches = 4});
  ASSERT_TRUE(gpipe.ok()) << gpipe.status();
  ExpectRejected({.kind = ScheduleKind::kOneFOneB, .stages = 2, .micro_batches = 4}, *gpipe,
                 "rank 0 holds the activations of 4 micro-batch chunks at once, more than the 1F1B bound of 2");
}

}  // namespace
}  // namespace tetra
