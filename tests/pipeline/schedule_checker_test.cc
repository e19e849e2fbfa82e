// The schedule checker on every generated table of pp 1..8, micro-batches
// 1..16 and virtual stages 1..4 where the kind allows them, every rank: the
// tables pass, the bubble equals the textbook formula and the peak live
// activations the kind's closed form. The same for ZB-H1 and DualPipeV
// (split backwards) with their own formulas, derived by hand in
// schedule_checker.h, and their invariants asserted on the tables directly.
// Then timelines worked out by hand, and broken tables (the classic blocking
// 1F1B deadlock, a missing send, a backward before its forward, a weight
// gradient before its backward or missing, a local hop out of order, ...)
// that the checker must reject, and the timeline of executed orders
// (receives where the rank waits, a late send).
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

constexpr ScheduleKind kKinds[] = {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB,
                                   ScheduleKind::kInterleaved};

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
    case ScheduleKind::kZeroBubbleH1:
    case ScheduleKind::kDualPipeV:
      break;  // NewKindsAreSoundWithTheirBubbleAndPeak
  }
  return -1;
}

TEST(ScheduleCheckerTest, EveryGeneratedScheduleIsSoundWithTheTextbookBubble) {
  int checked = 0;
  for (ScheduleKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          const ScheduleSpec spec{
              .kind = kind, .stages = p, .micro_batches = m, .virtual_stages = v};
          const std::string name = std::string(ScheduleKindName(kind)) + " p " + std::to_string(p) +
                                   " m " + std::to_string(m) + " v " + std::to_string(v);
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
            EXPECT_EQ(r.peak_activations, ExpectedPeak(kind, p, m, v, rank))
                << name << " rank " << rank;
            EXPECT_EQ(r.timeline.size(), static_cast<size_t>(2 * m * v))
                << name << " rank " << rank;
            if (v == 1) {
              EXPECT_EQ(r.peak_activations_per_chunk, std::vector<int>{r.peak_activations}) << name;
            }
          }
          EXPECT_DOUBLE_EQ(report->BubbleFraction(), static_cast<double>(p - 1) / (v * m + p - 1))
              << name;
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

// The step time, in units, of the split kinds' tables, as schedule_checker.h
// derives it: ZB-H1 3m + p - 1 (rank 0 waits p - 1 units for its first
// input gradient, then never) or, with m < p, 2m + 2p - 1 (the last
// micro-batch's F and B_in pass rank p - 1 at 1 unit each from p - 1 on, its
// B_in climbs p - 1 ranks and rank 0 ends with its W); DualPipeV 6m + p - 1
// (rank p - 1 starts at p - 1 and never waits).
int ExpectedStepTime(ScheduleKind kind, int p, int m) {
  if (kind == ScheduleKind::kDualPipeV) return 6 * m + p - 1;
  return m >= p ? 3 * m + p - 1 : 2 * m + 2 * p - 1;
}

// Table invariants of a split kind, checked on the tables themselves rather
// than through the checker: on its rank, every (micro-batch, chunk) runs F,
// B and W once each, in that order; DualPipeV's middle hop has no messages,
// its chunk 1 forward after chunk 0's and chunk 0's backward after chunk
// 1's; no message names its own rank.
void ExpectSplitInvariants(const ScheduleSpec& spec, const std::vector<std::vector<Action>>& tables,
                           const std::string& name) {
  const int v = spec.virtual_stages;
  for (int rank = 0; rank < spec.stages; ++rank) {
    // Position of F, B and W of each (micro-batch, chunk); -1: absent.
    std::vector<std::vector<int>> at(static_cast<size_t>(spec.micro_batches) * v,
                                     std::vector<int>(3, -1));
    int weights = 0;
    for (size_t i = 0; i < tables[rank].size(); ++i) {
      const Action& a = tables[rank][i];
      EXPECT_NE(a.peer, rank) << name << " rank " << rank << ": " << ActionText(a);
      const int slot = a.type == T::kForward    ? 0
                       : a.type == T::kBackward ? 1
                       : a.type == T::kWeight   ? 2
                                                : -1;
      if (slot < 0) continue;
      weights += a.type == T::kWeight;
      int& where = at[static_cast<size_t>(a.micro_batch) * v + a.chunk][slot];
      EXPECT_EQ(where, -1) << name << " rank " << rank << ": twice " << ActionText(a);
      where = static_cast<int>(i);
    }
    EXPECT_EQ(weights, spec.micro_batches * v) << name << " rank " << rank;
    for (int mb = 0; mb < spec.micro_batches; ++mb) {
      for (int c = 0; c < v; ++c) {
        const std::vector<int>& f_b_w = at[static_cast<size_t>(mb) * v + c];
        EXPECT_GE(f_b_w[0], 0) << name << " rank " << rank << " mb " << mb << " chunk " << c;
        EXPECT_LT(f_b_w[0], f_b_w[1]) << name << " rank " << rank << " mb " << mb << " chunk " << c;
        EXPECT_LT(f_b_w[1], f_b_w[2]) << name << " rank " << rank << " mb " << mb << " chunk " << c;
        if (spec.kind == ScheduleKind::kDualPipeV && rank == spec.stages - 1 && c == 0) {
          const std::vector<int>& other = at[static_cast<size_t>(mb) * v + 1];
          EXPECT_LT(f_b_w[0], other[0])
              << name << " mb " << mb << ": chunk 1 reads chunk 0's forward";
          EXPECT_LT(other[1], f_b_w[1])
              << name << " mb " << mb << ": chunk 0 reads chunk 1's backward";
        }
      }
    }
    if (spec.kind == ScheduleKind::kDualPipeV && rank == spec.stages - 1) {
      for (const Action& a : tables[rank]) {
        const bool middle =
            ((a.type == T::kSendActivation || a.type == T::kRecvGradient) && a.chunk == 0) ||
            ((a.type == T::kRecvActivation || a.type == T::kSendGradient) && a.chunk == 1);
        EXPECT_FALSE(middle) << name << ": " << ActionText(a);
      }
    }
  }
}

TEST(ScheduleCheckerTest, NewKindsAreSoundWithTheirBubbleAndPeak) {
  int checked = 0;
  for (ScheduleKind kind : {ScheduleKind::kZeroBubbleH1, ScheduleKind::kDualPipeV}) {
    const int v = kind == ScheduleKind::kDualPipeV ? 2 : 1;
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 20; ++m) {
        const ScheduleSpec spec{.kind = kind, .stages = p, .micro_batches = m, .virtual_stages = v};
        const std::string name = std::string(ScheduleKindName(kind)) + " p " + std::to_string(p) +
                                 " m " + std::to_string(m);
        absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
        const bool allowed = kind == ScheduleKind::kZeroBubbleH1 || (p >= 2 && m >= 2 * p);
        ASSERT_EQ(tables.ok(), allowed) << name << ": " << tables.status();
        if (!tables.ok()) continue;
        ExpectSplitInvariants(spec, *tables, name);
        absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
        ASSERT_TRUE(report.ok()) << name << ": " << report.status();
        // F, B and W are 1 unit each: a rank is busy 3 v m.
        const int step = ExpectedStepTime(kind, p, m);
        EXPECT_EQ(report->step_time, step) << name;
        // Activations live from F to W: ZB-H1 holds min(p, m) on every rank
        // (rank r's p - r - 1 warm-up forwards, the one in flight and the r
        // whose W it postpones), DualPipeV 2p + 1 (schedule_checker.h).
        const int peak = kind == ScheduleKind::kDualPipeV ? 2 * p + 1 : std::min(p, m);
        for (int rank = 0; rank < p; ++rank) {
          const RankReport& r = report->ranks[rank];
          EXPECT_EQ(r.busy_time, 3 * v * m) << name << " rank " << rank;
          EXPECT_EQ(r.idle_time, step - 3 * v * m) << name << " rank " << rank;
          EXPECT_EQ(r.timeline.size(), static_cast<size_t>(3 * m * v)) << name << " rank " << rank;
          EXPECT_EQ(r.peak_activations, peak) << name << " rank " << rank;
          EXPECT_LE(r.peak_activations, ActivationBound(spec, rank)) << name << " rank " << rank;
        }
        EXPECT_DOUBLE_EQ(report->BubbleFraction(), static_cast<double>(step - 3 * v * m) / step)
            << name;
        EXPECT_DOUBLE_EQ(report->BubbleFraction(), IdealBubbleFraction(spec)) << name;
        ++checked;
      }
    }
  }
  // ZB-H1: 8 x 20; DualPipeV: p 2..8 with m from 2p to 20.
  int dualpipe = 0;
  for (int p = 2; p <= 8; ++p) dualpipe += 20 - 2 * p + 1;
  EXPECT_EQ(checked, 8 * 20 + dualpipe);
}

// The simulated bubble of the tables of `spec`.
double SimulatedBubble(const ScheduleSpec& spec) {
  absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
  EXPECT_TRUE(tables.ok()) << tables.status();
  if (!tables.ok()) return -1;
  absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? report->BubbleFraction() : -1;
}

TEST(ScheduleCheckerTest, ZeroBubbleBeatsOneFOneBAndDualPipeVBeatsInterleaving) {
  for (int p : {2, 4}) {
    const int m = 8;
    const double one_f_one_b = SimulatedBubble({ScheduleKind::kOneFOneB, p, m, 1});
    const double zb_h1 = SimulatedBubble({ScheduleKind::kZeroBubbleH1, p, m, 1});
    const double interleaved = SimulatedBubble({ScheduleKind::kInterleaved, p, m, 2});
    const double dualpipe_v = SimulatedBubble({ScheduleKind::kDualPipeV, p, m, 2});
    EXPECT_LT(zb_h1, one_f_one_b) << "p " << p;
    EXPECT_LT(dualpipe_v, interleaved) << "p " << p;
    // (p - 1) / (3m + p - 1) against (p - 1) / (m + p - 1), and
    // (p - 1) / (6m + p - 1) against (p - 1) / (2m + p - 1).
    EXPECT_DOUBLE_EQ(zb_h1, (p - 1.0) / (3 * m + p - 1));
    EXPECT_DOUBLE_EQ(one_f_one_b, (p - 1.0) / (m + p - 1));
    EXPECT_DOUBLE_EQ(dualpipe_v, (p - 1.0) / (6 * m + p - 1));
    EXPECT_DOUBLE_EQ(interleaved, (p - 1.0) / (2 * m + p - 1));
  }
}

TEST(ScheduleCheckerTest, IdealBubbleFormula) {
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kOneFOneB, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kGPipe, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kInterleaved, 4, 8, 2}), 3.0 / 19);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kOneFOneB, 1, 5, 1}), 0.0);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kZeroBubbleH1, 4, 8, 1}), 3.0 / 27);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kZeroBubbleH1, 4, 2, 1}), 5.0 / 11);  // m < p
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({ScheduleKind::kDualPipeV, 4, 8, 2}), 3.0 / 51);
  EXPECT_EQ(IdealBubbleFormula({ScheduleKind::kOneFOneB, 4, 8, 1}), "(p-1)/(m+p-1)");
  EXPECT_EQ(IdealBubbleFormula({ScheduleKind::kInterleaved, 4, 8, 2}), "(p-1)/(v*m+p-1)");
  EXPECT_EQ(IdealBubbleFormula({ScheduleKind::kZeroBubbleH1, 4, 8, 1}), "(p-1)/(3*m+p-1)");
  EXPECT_EQ(IdealBubbleFormula({ScheduleKind::kZeroBubbleH1, 4, 2, 1}), "(2*p-m-1)/(2*m+2*p-1)");
  EXPECT_EQ(IdealBubbleFormula({ScheduleKind::kDualPipeV, 4, 8, 2}), "(p-1)/(6*m+p-1)");
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

// (start, end) of every computation of `rank`, in table order.
std::vector<std::pair<int, int>> StartsAndEnds(const RankReport& rank) {
  std::vector<std::pair<int, int>> out;
  for (const TimedAction& t : rank.timeline) out.emplace_back(t.start, t.end);
  return out;
}
using Spans = std::vector<std::pair<int, int>>;

// Spans of 1 unit each, back to back from `from` to `to`, but for `gap`.
Spans UnitSpans(int from, int to, int gap = -1) {
  Spans spans;
  for (int t = from; t < to; ++t) {
    if (t != gap) spans.emplace_back(t, t + 1);
  }
  return spans;
}

TEST(ScheduleCheckerTest, ZeroBubbleH1TimelineWorkedByHand) {
  // p 2, m 4, F = B = W = 1 (schedule_test.cc's ZB-H1 table): rank 0 runs
  // F0 F1, waits 1 unit for B0's gradient (rank 1's B0 [2,3)), then never;
  // rank 1 waits 1 unit for F0's activation, then never. Step 3m + p - 1 = 13.
  const ScheduleSpec spec{.kind = ScheduleKind::kZeroBubbleH1, .stages = 2, .micro_batches = 4};
  absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
  ASSERT_TRUE(tables.ok()) << tables.status();
  absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(StartsAndEnds(report->ranks[0]), UnitSpans(0, 13, /*gap=*/2));
  EXPECT_EQ(StartsAndEnds(report->ranks[1]), UnitSpans(1, 13));
  EXPECT_EQ(report->step_time, 13);
  EXPECT_EQ(report->ranks[0].idle_time, 1);
  EXPECT_EQ(report->ranks[1].idle_time, 1);
  // Live until W: rank 1 still holds micro-batch 0 (W0 [5,6)) while F1 runs.
  EXPECT_EQ(report->ranks[0].peak_activations, 2);
  EXPECT_EQ(report->ranks[1].peak_activations, 2);
}

TEST(ScheduleCheckerTest, DualPipeVTimelineWorkedByHand) {
  // p 2, m 4 (schedule_test.cc's DualPipeV orders), F = B = W = 1, a pair's
  // outputs at its end. Virtual stages: 0 = rank 0 chunk a, 1 = rank 1 a,
  // 2 = rank 1 b (reads stage 1 on the rank), 3 = rank 0 b (the loss).
  //   rank 0: F0a F1a F2a [0,3); F0b [3,4) (rank 1's F0b ends at 3); B0b W0b
  //     [4,6); F1b [6,7) (rank 1's F1b ends at 5); F3a&B1b [7,9); W1b; F2b&B0a
  //     [10,12) (rank 1's pair F2b&B0a ends at 10); W0a B2b W2b [12,15); idle
  //     at 15: F3b&B1a needs rank 1's pair F3b&B1a, which ends at 16: [16,18);
  //     W1a B3b W3b [18,21); B2a [21,22) (rank 1's B2a ends at 20); W2a; B3a
  //     [23,24) (rank 1's B3a ends at 23); W3a [24,25).
  //   rank 1: F0a [1,2) (rank 0's F0a ends at 1), F0b, F1a F1b F2a [3,6); B0b
  //     [6,7) (rank 0's B0b ends at 5), W0b; F2b&B0a [8,10), W0a; F3a&B1b
  //     [11,13) (rank 0's pair ends at 9), W1b, F3b&B1a [14,16), W1a; B2b
  //     [17,18) (rank 0's B2b ends at 14), W2b B2a W2a; B3b [21,22) (rank 0's
  //     B3b ends at 20), B3a W3b W3a [22,25).
  // Step 25 = 6m + p - 1; each rank idles 1 unit, p - 1.
  const ScheduleSpec spec{
      .kind = ScheduleKind::kDualPipeV, .stages = 2, .micro_batches = 4, .virtual_stages = 2};
  absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
  ASSERT_TRUE(tables.ok()) << tables.status();
  absl::StatusOr<ScheduleReport> report = CheckSchedule(spec, *tables);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(StartsAndEnds(report->ranks[0]), UnitSpans(0, 25, /*gap=*/15));
  EXPECT_EQ(StartsAndEnds(report->ranks[1]), UnitSpans(1, 25));
  EXPECT_EQ(report->step_time, 25);
  EXPECT_EQ(report->ranks[0].idle_time, 1);
  EXPECT_EQ(report->ranks[1].idle_time, 1);
  // 2p + 1 = 5 chunks live at once: rank 0 holds F0a F1a F2a F1b and F3a
  // (F0b's W ran at 5), rank 1 F0a F0b F1a F1b and F2a.
  EXPECT_EQ(report->ranks[0].peak_activations, 5);
  EXPECT_EQ(report->ranks[1].peak_activations, 5);
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
  const std::vector<std::vector<Action>> tables = {{{T::kForward, 0, 0, -1},
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
  ExpectRejected(
      kTwoByTwo, tables,
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
                 "rank 1 action 2 (receive activation of micro-batch 1 chunk 0 from rank 0): rank "
                 "0 never sends it");

  tables = *good;
  tables[1].erase(tables[1].begin() + 2);  // rank 1 runs F1 without its input
  ExpectRejected(kTwoByTwo, tables,
                 "rank 1 action 4 (forward of micro-batch 1 chunk 0): comes before the receive or "
                 "computation it "
                 "depends on");

  tables = *good;
  tables[0][1].peer = 0;  // rank 0 sends to itself
  ExpectRejected(kTwoByTwo, tables,
                 "rank 0 action 1 (send activation of micro-batch 0 chunk 0 to rank 0): the "
                 "neighbouring virtual stage 1 is on rank 1");

  tables = *good;
  tables[0].push_back({T::kRecvActivation, 0, 0, 1});  // the first stage has no input to receive
  ExpectRejected(kTwoByTwo, tables, "virtual stage 0 of 2 has no such neighbour");

  tables = *good;
  tables[1].push_back({T::kBackward, 1, 0, -1});
  ExpectRejected(kTwoByTwo, tables,
                 "rank 1 action 8 (backward of micro-batch 1 chunk 0): appears twice");

  tables = *good;
  tables[1][0].micro_batch = 2;
  ExpectRejected(kTwoByTwo, tables, "outside 2 micro-batches x 1 chunks");

  ExpectRejected(kTwoByTwo, {(*good)[0]}, "1 tables for 2 pipeline ranks");

  const ScheduleSpec one{.kind = ScheduleKind::kGPipe, .stages = 1, .micro_batches = 2};
  ExpectRejected(one, {{{T::kBackward, 0, 0, -1}, {T::kForward, 0, 0, -1}}},
                 "rank 0 action 0 (backward of micro-batch 0 chunk 0): comes before its forward");
  ExpectRejected(one,
                 {{{T::kForward, 0, 0, -1}, {T::kForward, 1, 0, -1}, {T::kBackward, 0, 0, -1}}},
                 "rank 0 never runs the backward of micro-batch 1 chunk 0");
}

TEST(ScheduleCheckerTest, BrokenSplitBackwardTablesAreRejected) {
  const ScheduleSpec zb{.kind = ScheduleKind::kZeroBubbleH1, .stages = 2, .micro_batches = 2};
  absl::StatusOr<std::vector<std::vector<Action>>> good = BuildAllSchedules(zb);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE(CheckSchedule(zb, *good).ok());
  auto find = [](const std::vector<Action>& table, const Action& a) {
    return static_cast<size_t>(std::find(table.begin(), table.end(), a) - table.begin());
  };
  const Action b1{T::kBackward, 1, 0, -1}, w1{T::kWeight, 1, 0, -1};

  std::vector<std::vector<Action>> tables = *good;
  tables[0].erase(tables[0].begin() + find(tables[0], w1));  // rank 0 never computes W1
  ExpectRejected(zb, tables, "rank 0 never runs the weight gradient of micro-batch 1 chunk 0");

  tables = *good;
  tables[0].erase(tables[0].begin() + find(tables[0], w1));
  tables[0].insert(tables[0].begin() + find(tables[0], b1), w1);  // W1 just before B1
  ExpectRejected(zb, tables,
                 "(weight gradient of micro-batch 1 chunk 0): comes before its backward");

  tables = *good;
  tables[1].push_back(w1);
  ExpectRejected(zb, tables, "(weight gradient of micro-batch 1 chunk 0): appears twice");

  tables = *good;
  tables[1][find(tables[1], w1)].peer = 0;
  ExpectRejected(zb, tables,
                 "(weight gradient of micro-batch 1 chunk 0): a computation names no peer");

  // 1F1B's backward is whole: a W there is an error, whatever its place.
  std::vector<std::vector<Action>> fused = *BuildAllSchedules(kTwoByTwo);
  fused[1].push_back({T::kWeight, 0, 0, -1});
  ExpectRejected(
      kTwoByTwo, fused,
      "rank 1 action 8 (weight gradient of micro-batch 0 chunk 0): the 1F1B schedule runs whole "
      "backwards, with no separate weight gradient");
}

TEST(ScheduleCheckerTest, DualPipeVLocalHopMustRunInOrderWithoutMessages) {
  // Rank 1 of 2 holds virtual stages 1 (chunk 0) and 2 (chunk 1).
  const ScheduleSpec spec{
      .kind = ScheduleKind::kDualPipeV, .stages = 2, .micro_batches = 4, .virtual_stages = 2};
  absl::StatusOr<std::vector<std::vector<Action>>> good = BuildAllSchedules(spec);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE(CheckSchedule(spec, *good).ok());
  auto move_before = [](std::vector<Action>& table, const Action& moved, const Action& before) {
    table.erase(std::find(table.begin(), table.end(), moved));
    table.insert(std::find(table.begin(), table.end(), before), moved);
  };
  const Action f0a{T::kForward, 0, 0, -1}, f0b{T::kForward, 0, 1, -1};
  const Action b0a{T::kBackward, 0, 0, -1}, b0b{T::kBackward, 0, 1, -1};

  std::vector<std::vector<Action>> tables = *good;
  move_before(tables[1], f0b, f0a);  // chunk 1 before the chunk 0 output it reads
  ExpectRejected(
      spec, tables,
      "rank 1 action 1 (forward of micro-batch 0 chunk 1): comes before the forward of micro-batch "
      "0 "
      "chunk 0, whose output it reads on this rank (virtual stages 1 and 2 are both here)");

  tables = *good;
  move_before(tables[1], b0a, b0b);  // chunk 0's backward before chunk 1's gradient exists
  ExpectRejected(spec, tables,
                 "(backward of micro-batch 0 chunk 0): comes before the backward of micro-batch 0 "
                 "chunk 1, whose "
                 "output it reads on this rank (virtual stages 1 and 2 are both here)");

  // A message on the local hop, even a matched one, is an error.
  tables = *good;
  tables[1].insert(tables[1].begin() + 2, {T::kSendActivation, 0, 0, 1});
  ExpectRejected(spec, tables,
                 "rank 1 action 2 (send activation of micro-batch 0 chunk 0 to rank 1): virtual "
                 "stages 1 and 2 are "
                 "both on rank 1: their data passes without a message");
  tables = *good;
  tables[1].push_back({T::kRecvGradient, 0, 0, 0});
  ExpectRejected(spec, tables, "virtual stages 1 and 2 are both on rank 1");

  // The V's other hops name the rank of the neighbouring stage: rank 0's
  // chunk 1 (stage 3) gets its activation from stage 2, on rank 1.
  tables = *good;
  const auto receive =
      std::find(tables[0].begin(), tables[0].end(), Action{T::kRecvActivation, 0, 1, 1});
  ASSERT_NE(receive, tables[0].end());
  receive->peer = 0;
  ExpectRejected(spec, tables, "the neighbouring virtual stage 2 is on rank 1");
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
    EXPECT_EQ(report->ranks[rank].peak_activations, table_report->ranks[rank].peak_activations)
        << rank;
  }
  EXPECT_EQ(report->BubbleFraction(), IdealBubbleFraction(kTwoByTwo));
}

TEST(SimulateTimelineTest, ALateSendDelaysItsReceiver) {
  // Rank 1 posts B0's gradient after F1 [4,5) instead of at 4: rank 0's B0
  // starts at 5, not 4 (TimelineWorkedByHand has the table's timeline).
  std::vector<std::vector<Action>> executed = {{{T::kForward, 0, 0, -1},
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
  executed[0] = {{T::kForward, 0, 0, -1},       {T::kForward, 1, 0, -1},
                 {T::kRecvGradient, 0, 0, 1},   {T::kBackward, 0, 0, -1},
                 {T::kSendActivation, 0, 0, 1}, {T::kSendActivation, 1, 0, 1},
                 {T::kRecvGradient, 1, 0, 1},   {T::kBackward, 1, 0, -1}};
  report = SimulateTimeline(kTwoByTwo, executed);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(
      report.status().message(),
      HasSubstr(
          "stalled: rank 0 waits at action 2 (receive gradient of micro-batch 0 chunk 0 from rank "
          "1); rank 1 waits at action 0 (receive activation of micro-batch 0 chunk 0 from rank "
          "0)"));
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
                 "rank 0 holds the activations of 4 micro-batch chunks at once, more than the 1F1B "
                 "bound of 2");
}

}  // namespace
}  // namespace tetra
