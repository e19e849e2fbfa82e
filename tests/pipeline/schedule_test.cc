// Schedule tables: the compute orders of GPipe, 1F1B, Megatron-LM's
// interleaved 1F1B, ZB-H1 and DualPipeV against orders written out by hand
// (ZB-H1 from the zero-bubble paper's rule, DualPipeV from dualpipev.py's
// eight steps), whole 1F1B and ZB-H1 tables with their messages placed by
// hand from the ideal timeline, DualPipeV's V placement and its local hop,
// the config entry point, and the errors for combinations that cannot run.
// Everything compares exactly.
#include "pipeline/schedule.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/schedule_checker.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

// "F0 F1 B0 W0 ...": the computations of `table`, with a chunk letter (a, b,
// ...) when `chunks` > 1.
std::string ComputeCells(const std::vector<Action>& table, int chunks = 1) {
  std::vector<std::string> cells;
  for (const Action& a : table) {
    if (!IsCompute(a.type)) continue;
    const char* letter = a.type == ActionType::kForward  ? "F"
                         : a.type == ActionType::kWeight ? "W"
                                                         : "B";
    std::string cell = absl::StrCat(letter, a.micro_batch);
    if (chunks > 1) cell += static_cast<char>('a' + a.chunk);
    cells.push_back(cell);
  }
  return absl::StrJoin(cells, " ");
}

std::vector<Action> Table(const ScheduleSpec& spec, int rank) {
  absl::StatusOr<std::vector<Action>> table = BuildSchedule(spec, rank);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *table : std::vector<Action>{};
}

TEST(ScheduleTest, GPipeRunsAllForwardsThenAllBackwards) {
  const ScheduleSpec spec{.kind = ScheduleKind::kGPipe, .stages = 3, .micro_batches = 3};
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(ComputeCells(Table(spec, rank)), "F0 F1 F2 B0 B1 B2");
}

TEST(ScheduleTest, OneFOneBWarmsUpWithTheStagesAfterTheRank) {
  const ScheduleSpec spec{.kind = ScheduleKind::kOneFOneB, .stages = 4, .micro_batches = 6};
  EXPECT_EQ(ComputeCells(Table(spec, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");  // 3 warm-up forwards
  EXPECT_EQ(ComputeCells(Table(spec, 1)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(ComputeCells(Table(spec, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(ComputeCells(Table(spec, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up stops at m.
  const ScheduleSpec few{.kind = ScheduleKind::kOneFOneB, .stages = 4, .micro_batches = 2};
  EXPECT_EQ(ComputeCells(Table(few, 0)), "F0 F1 B0 B1");
  EXPECT_EQ(ComputeCells(Table(few, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(ComputeCells(Table(few, 3)), "F0 B0 F1 B1");
}

TEST(ScheduleTest, InterleavedFollowsMegatronOrder) {
  // p 2, v 2, m 4: virtual micro-batch k runs micro-batch (k / 4) * 2 + k % 2
  // on chunk (k % 4) / 2 forwards and 1 - that backwards. Warm-up 2 (p - r - 1)
  // + (v - 1) p: 4 on rank 0, 2 on rank 1.
  const ScheduleSpec spec{
      .kind = ScheduleKind::kInterleaved, .stages = 2, .micro_batches = 4, .virtual_stages = 2};
  EXPECT_EQ(ComputeCells(Table(spec, 0), 2),
            "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a");
  EXPECT_EQ(ComputeCells(Table(spec, 1), 2),
            "F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a");
}

TEST(ScheduleTest, OneFOneBTableWithMessagesInTimelineOrder) {
  // p 2, m 2 in the ideal timeline (F 1 unit, B 2): rank 0 runs F0 [0,1),
  // F1 [1,2), B0 [4,6), B1 [7,9); rank 1 F0 [1,2), B0 [2,4), F1 [4,5),
  // B1 [5,7). Activations leave rank 0 at 1 and 2, gradients rank 1 at 4 and
  // 7; each message sits where its data exists, before a computation that
  // starts at the same time.
  using T = ActionType;
  const ScheduleSpec spec{.kind = ScheduleKind::kOneFOneB, .stages = 2, .micro_batches = 2};
  EXPECT_EQ(Table(spec, 0), (std::vector<Action>{{T::kForward, 0, 0, -1},
                                                 {T::kSendActivation, 0, 0, 1},
                                                 {T::kForward, 1, 0, -1},
                                                 {T::kSendActivation, 1, 0, 1},
                                                 {T::kRecvGradient, 0, 0, 1},
                                                 {T::kBackward, 0, 0, -1},
                                                 {T::kRecvGradient, 1, 0, 1},
                                                 {T::kBackward, 1, 0, -1}}));
  EXPECT_EQ(Table(spec, 1), (std::vector<Action>{{T::kRecvActivation, 0, 0, 0},
                                                 {T::kForward, 0, 0, -1},
                                                 {T::kRecvActivation, 1, 0, 0},
                                                 {T::kBackward, 0, 0, -1},
                                                 {T::kSendGradient, 0, 0, 0},
                                                 {T::kForward, 1, 0, -1},
                                                 {T::kBackward, 1, 0, -1},
                                                 {T::kSendGradient, 1, 0, 0}}));
}

TEST(ScheduleTest, InterleavedChunksWrapAroundThePipeline) {
  // p 2, v 2: virtual stages 0 (rank 0 chunk 0), 1 (rank 1 chunk 0), 2 (rank 0
  // chunk 1), 3 (rank 1 chunk 1). Rank 1's chunk 0 sends activations to rank 0
  // chunk 1, which sends its gradients back to rank 1 chunk 0.
  const ScheduleSpec spec{
      .kind = ScheduleKind::kInterleaved, .stages = 2, .micro_batches = 2, .virtual_stages = 2};
  const std::vector<Action> rank0 = Table(spec, 0);
  const std::vector<Action> rank1 = Table(spec, 1);
  using T = ActionType;
  auto has = [](const std::vector<Action>& table, const Action& a) {
    return std::find(table.begin(), table.end(), a) != table.end();
  };
  EXPECT_TRUE(has(rank1, {T::kSendActivation, 1, 0, 0}));
  EXPECT_TRUE(has(rank0, {T::kRecvActivation, 1, 1, 1}));
  EXPECT_TRUE(has(rank0, {T::kSendGradient, 1, 1, 1}));
  EXPECT_TRUE(has(rank1, {T::kRecvGradient, 1, 0, 0}));
  // The first and last virtual stages have no neighbour on that side.
  EXPECT_FALSE(has(rank0, {T::kRecvActivation, 0, 0, 1}));
  EXPECT_FALSE(has(rank1, {T::kSendActivation, 0, 1, 0}));
}

TEST(ScheduleTest, SingleStageHasNoMessages) {
  const ScheduleSpec spec{.kind = ScheduleKind::kOneFOneB, .stages = 1, .micro_batches = 3};
  EXPECT_EQ(Table(spec, 0), (std::vector<Action>{{ActionType::kForward, 0, 0, -1},
                                                 {ActionType::kBackward, 0, 0, -1},
                                                 {ActionType::kForward, 1, 0, -1},
                                                 {ActionType::kBackward, 1, 0, -1},
                                                 {ActionType::kForward, 2, 0, -1},
                                                 {ActionType::kBackward, 2, 0, -1}}));
}

TEST(ScheduleTest, OneRankIsItsSliceOfAllRanks) {
  const ScheduleSpec spec{
      .kind = ScheduleKind::kInterleaved, .stages = 4, .micro_batches = 8, .virtual_stages = 3};
  absl::StatusOr<std::vector<std::vector<Action>>> all = BuildAllSchedules(spec);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(Table(spec, rank), (*all)[rank]) << "rank " << rank;
}

TEST(ScheduleTest, NamesAndCostModel) {
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kZeroBubbleH1), "ZB-H1");
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kDualPipeV), "DualPipeV");
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    EXPECT_FALSE(SplitsBackward(kind)) << ScheduleKindName(kind);
    EXPECT_EQ(ComputeTime(kind, ActionType::kForward), 1);
    EXPECT_EQ(ComputeTime(kind, ActionType::kBackward), 2);  // the whole backward
  }
  for (ScheduleKind kind : {ScheduleKind::kZeroBubbleH1, ScheduleKind::kDualPipeV}) {
    EXPECT_TRUE(SplitsBackward(kind)) << ScheduleKindName(kind);
    EXPECT_EQ(ComputeTime(kind, ActionType::kForward), 1);
    EXPECT_EQ(ComputeTime(kind, ActionType::kBackward), 1);  // B: the input gradient
    EXPECT_EQ(ComputeTime(kind, ActionType::kWeight), 1);    // W
  }
  EXPECT_TRUE(IsCompute(ActionType::kWeight));
  EXPECT_EQ(ActionText({ActionType::kWeight, 3, 0, -1}),
            "weight gradient of micro-batch 3 chunk 0");
}

TEST(ScheduleTest, ZeroBubbleH1PostponesTheFirstRankWeights) {
  // 1F1B's forwards and backwards (B = input gradient); after its j-th
  // backward (from 0) rank r runs the oldest W it owes when j >= r, and the r
  // it still owes at the end.
  const ScheduleSpec spec{.kind = ScheduleKind::kZeroBubbleH1, .stages = 4, .micro_batches = 6};
  EXPECT_EQ(ComputeCells(Table(spec, 0)), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5");
  EXPECT_EQ(ComputeCells(Table(spec, 1)), "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5");
  EXPECT_EQ(ComputeCells(Table(spec, 2)), "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5");
  EXPECT_EQ(ComputeCells(Table(spec, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5");
  // Fewer micro-batches than stages: the W's all wait for the end.
  const ScheduleSpec few{.kind = ScheduleKind::kZeroBubbleH1, .stages = 4, .micro_batches = 2};
  EXPECT_EQ(ComputeCells(Table(few, 0)), "F0 F1 B0 W0 B1 W1");
  EXPECT_EQ(ComputeCells(Table(few, 3)), "F0 B0 F1 B1 W0 W1");
}

TEST(ScheduleTest, ZeroBubbleH1TableWithMessagesInTimelineOrder) {
  // p 2, m 4 in the ideal timeline (F, B, W 1 unit each), worked from the
  // orders F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3 (rank 0) and F0 B0 F1 B1 W0 F2
  // B2 W1 F3 B3 W2 W3 (rank 1):
  //   rank 0: F0 [0,1) F1 [1,2) B0 [3,4) W0 [4,5) F2 [5,6) B1 [6,7) W1 [7,8)
  //           F3 [8,9) B2 [9,10) W2 [10,11) B3 [11,12) W3 [12,13)
  //   rank 1: F0 [1,2) B0 [2,3) F1 [3,4) B1 [4,5) W0 [5,6) F2 [6,7) B2 [7,8)
  //           W1 [8,9) F3 [9,10) B3 [10,11) W2 [11,12) W3 [12,13)
  // Activations leave rank 0 at 1, 2, 6, 9; gradients rank 1 at 3, 5, 8, 11;
  // each message sits where its data exists, before a computation that
  // starts at the same time.
  using T = ActionType;
  const ScheduleSpec spec{.kind = ScheduleKind::kZeroBubbleH1, .stages = 2, .micro_batches = 4};
  EXPECT_EQ(Table(spec, 0), (std::vector<Action>{{T::kForward, 0, 0, -1},        // 0
                                                 {T::kSendActivation, 0, 0, 1},  // 1
                                                 {T::kForward, 1, 0, -1},        // 1
                                                 {T::kSendActivation, 1, 0, 1},  // 2
                                                 {T::kRecvGradient, 0, 0, 1},    // 3
                                                 {T::kBackward, 0, 0, -1},       // 3
                                                 {T::kWeight, 0, 0, -1},         // 4
                                                 {T::kRecvGradient, 1, 0, 1},    // 5
                                                 {T::kForward, 2, 0, -1},        // 5
                                                 {T::kSendActivation, 2, 0, 1},  // 6
                                                 {T::kBackward, 1, 0, -1},       // 6
                                                 {T::kWeight, 1, 0, -1},         // 7
                                                 {T::kRecvGradient, 2, 0, 1},    // 8
                                                 {T::kForward, 3, 0, -1},        // 8
                                                 {T::kSendActivation, 3, 0, 1},  // 9
                                                 {T::kBackward, 2, 0, -1},       // 9
                                                 {T::kWeight, 2, 0, -1},         // 10
                                                 {T::kRecvGradient, 3, 0, 1},    // 11
                                                 {T::kBackward, 3, 0, -1},       // 11
                                                 {T::kWeight, 3, 0, -1}}));      // 12
  EXPECT_EQ(Table(spec, 1), (std::vector<Action>{{T::kRecvActivation, 0, 0, 0},  // 1
                                                 {T::kForward, 0, 0, -1},        // 1
                                                 {T::kRecvActivation, 1, 0, 0},  // 2
                                                 {T::kBackward, 0, 0, -1},       // 2
                                                 {T::kSendGradient, 0, 0, 0},    // 3
                                                 {T::kForward, 1, 0, -1},        // 3
                                                 {T::kBackward, 1, 0, -1},       // 4
                                                 {T::kSendGradient, 1, 0, 0},    // 5
                                                 {T::kWeight, 0, 0, -1},         // 5
                                                 {T::kRecvActivation, 2, 0, 0},  // 6
                                                 {T::kForward, 2, 0, -1},        // 6
                                                 {T::kBackward, 2, 0, -1},       // 7
                                                 {T::kSendGradient, 2, 0, 0},    // 8
                                                 {T::kWeight, 1, 0, -1},         // 8
                                                 {T::kRecvActivation, 3, 0, 0},  // 9
                                                 {T::kForward, 3, 0, -1},        // 9
                                                 {T::kBackward, 3, 0, -1},       // 10
                                                 {T::kSendGradient, 3, 0, 0},    // 11
                                                 {T::kWeight, 2, 0, -1},         // 11
                                                 {T::kWeight, 3, 0, -1}}));      // 12
}

TEST(ScheduleTest, DualPipeVPlacesTheChunksInAV) {
  for (int p : {2, 3, 4, 8}) {
    const ScheduleSpec spec{
        .kind = ScheduleKind::kDualPipeV, .stages = p, .micro_batches = 2 * p, .virtual_stages = 2};
    for (int rank = 0; rank < p; ++rank) {
      EXPECT_EQ(VirtualStage(spec, rank, 0), rank) << p;
      EXPECT_EQ(VirtualStage(spec, rank, 1), 2 * p - 1 - rank) << p;
      EXPECT_EQ(RankOfVirtualStage(spec, rank), rank) << p;
      EXPECT_EQ(RankOfVirtualStage(spec, 2 * p - 1 - rank), rank) << p;
    }
  }
  // The other kinds keep Megatron-LM's c * p + r.
  const ScheduleSpec interleaved{
      .kind = ScheduleKind::kInterleaved, .stages = 4, .micro_batches = 4, .virtual_stages = 2};
  EXPECT_EQ(VirtualStage(interleaved, 1, 1), 5);
  EXPECT_EQ(RankOfVirtualStage(interleaved, 5), 1);
}

TEST(ScheduleTest, DualPipeVFollowsItsEightSteps) {
  // p 2, m 4 (a, b: chunks 0 and 1; rank 0 holds virtual stages 0 and 3,
  // rank 1 stages 1 and 2). Rank 0 (r = 0): 1. two F0's; 2. F0 F1; 3. B1 W1
  // F1; 4. one (F0&B1 W1, F1&B0 W0); 5. B1 W1, F1&B0 W0; 6. B1 W1, B0 with W
  // postponed; 7. W, B0 postponed; 8. W.
  const ScheduleSpec spec{
      .kind = ScheduleKind::kDualPipeV, .stages = 2, .micro_batches = 4, .virtual_stages = 2};
  const std::vector<Action> rank0 = Table(spec, 0), rank1 = Table(spec, 1);
  EXPECT_EQ(ComputeCells(rank0, 2),
            "F0a F1a F2a F0b B0b W0b F1b F3a B1b W1b F2b B0a W0a B2b W2b F3b B1a W1a B3b W3b B2a "
            "W2a B3a W3a");
  // Rank 1 (r = 1): 1. none; 2. two (F0 F1); 3. none; 4. two (F0&B1 W1,
  // F1&B0 W0), the first F0, B1 apart; 5. none; 6. B1 W1 B0 W0, then B1, B0
  // with their W's postponed (the second half); 7. none; 8. two W's.
  EXPECT_EQ(ComputeCells(rank1, 2),
            "F0a F0b F1a F1b F2a B0b W0b F2b B0a W0a F3a B1b W1b F3b B1a W1a B2b W2b B2a W2a B3b "
            "B3a W3b W3a");
  // The paired F&B's stand next to each other, nothing between.
  auto adjacent = [](const std::vector<Action>& table, const Action& forward,
                     const Action& backward) {
    const auto at = std::find(table.begin(), table.end(), forward);
    return at != table.end() && at + 1 != table.end() && *(at + 1) == backward &&
           IsPairedForwardBackward(ScheduleKind::kDualPipeV, *at, *(at + 1));
  };
  using T = ActionType;
  EXPECT_TRUE(adjacent(rank0, {T::kForward, 3, 0, -1}, {T::kBackward, 1, 1, -1}));
  EXPECT_TRUE(adjacent(rank0, {T::kForward, 2, 1, -1}, {T::kBackward, 0, 0, -1}));
  EXPECT_TRUE(adjacent(rank0, {T::kForward, 3, 1, -1}, {T::kBackward, 1, 0, -1}));
  EXPECT_TRUE(adjacent(rank1, {T::kForward, 2, 1, -1}, {T::kBackward, 0, 0, -1}));
  EXPECT_TRUE(adjacent(rank1, {T::kForward, 3, 0, -1}, {T::kBackward, 1, 1, -1}));
  EXPECT_TRUE(adjacent(rank1, {T::kForward, 3, 1, -1}, {T::kBackward, 1, 0, -1}));
  EXPECT_FALSE(IsPairedForwardBackward(ScheduleKind::kOneFOneB, {T::kForward, 3, 0, -1},
                                       {T::kBackward, 1, 1, -1}));
  EXPECT_FALSE(IsPairedForwardBackward(ScheduleKind::kDualPipeV, {T::kForward, 3, 0, -1},
                                       {T::kBackward, 1, 0, -1}));
}

TEST(ScheduleTest, DualPipeVPairsAreContiguousAtEverySize) {
  // Steps 4 and 5 pair 2 (m - 2p + r + 1) + (p - r - 1) forwards with the
  // other chunk's backward; each pair is two neighbouring table entries.
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p, 2 * p + 1, 3 * p + 2}) {
      const ScheduleSpec spec{
          .kind = ScheduleKind::kDualPipeV, .stages = p, .micro_batches = m, .virtual_stages = 2};
      for (int r = 0; r < p; ++r) {
        const std::vector<Action> table = Table(spec, r);
        int pairs = 0;
        for (size_t i = 0; i + 1 < table.size(); ++i) {
          pairs += IsPairedForwardBackward(spec.kind, table[i], table[i + 1]);
        }
        EXPECT_GE(pairs, 2 * (m - 2 * p + r + 1) + (p - r - 1))
            << "p " << p << " m " << m << " rank " << r;
      }
    }
  }
}

TEST(ScheduleTest, DualPipeVMiddleHopHasNoMessages) {
  // Virtual stages p - 1 and p are chunks 0 and 1 of rank p - 1: the
  // activation and the gradient between them pass on the rank. Every other
  // hop is a message between the ranks of neighbouring virtual stages.
  using T = ActionType;
  for (int p : {2, 3, 4}) {
    const ScheduleSpec spec{.kind = ScheduleKind::kDualPipeV,
                            .stages = p,
                            .micro_batches = 2 * p + 1,
                            .virtual_stages = 2};
    absl::StatusOr<std::vector<std::vector<Action>>> all = BuildAllSchedules(spec);
    ASSERT_TRUE(all.ok()) << all.status();
    const std::vector<Action>& middle = (*all)[p - 1];
    for (const Action& a : middle) {
      const bool local_hop = (a.type == T::kSendActivation && a.chunk == 0) ||
                             (a.type == T::kRecvActivation && a.chunk == 1) ||
                             (a.type == T::kSendGradient && a.chunk == 1) ||
                             (a.type == T::kRecvGradient && a.chunk == 0);
      EXPECT_FALSE(local_hop) << "p " << p << ": " << ActionText(a);
      EXPECT_NE(a.peer, p - 1) << ActionText(a);
    }
    // Chunk 1 reads chunk 0's forward, chunk 0's backward reads chunk 1's.
    auto index = [&](const Action& a) {
      return std::find(middle.begin(), middle.end(), a) - middle.begin();
    };
    for (int mb = 0; mb < spec.micro_batches; ++mb) {
      EXPECT_LT(index({T::kForward, mb, 0, -1}), index({T::kForward, mb, 1, -1})) << mb;
      EXPECT_LT(index({T::kBackward, mb, 1, -1}), index({T::kBackward, mb, 0, -1})) << mb;
    }
    // Messages: rank 0's chunk 1 (the last stage) gets its activation from
    // rank 1's chunk 1 and sends its gradient back there.
    const std::vector<Action>& first = (*all)[0];
    auto has = [](const std::vector<Action>& table, const Action& a) {
      return std::find(table.begin(), table.end(), a) != table.end();
    };
    EXPECT_TRUE(has(first, {T::kRecvActivation, 0, 1, 1}));
    EXPECT_TRUE(has(first, {T::kSendGradient, 0, 1, 1}));
    EXPECT_TRUE(has(first, {T::kSendActivation, 0, 0, 1}));
    EXPECT_FALSE(has(first, {T::kSendActivation, 0, 1, 1}));  // the last stage sends nothing on
  }
}

TrainerConfig Config(int pipeline, int virtual_stages, ParallelConfig::Schedule schedule,
                     int global_batch, int micro_batch, int layers) {
  TrainerConfig config;
  config.mutable_parallel()->set_pipeline(pipeline);
  config.mutable_parallel()->set_virtual_stages(virtual_stages);
  config.mutable_parallel()->set_schedule(schedule);
  config.mutable_train()->set_global_batch_size(global_batch);
  config.mutable_train()->set_micro_batch_size(micro_batch);
  config.mutable_model()->set_num_hidden_layers(layers);
  return config;
}

TEST(ScheduleTest, SpecFromConfig) {
  // 32 samples / (2 per micro-batch x 2 data-parallel ranks) = 8 micro-batches.
  absl::StatusOr<ScheduleSpec> spec =
      ScheduleSpecFromConfig(Config(4, 1, ParallelConfig::GPIPE, 32, 2, 8), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kGPipe);
  EXPECT_EQ(spec->stages, 4);
  EXPECT_EQ(spec->micro_batches, 8);
  EXPECT_EQ(spec->virtual_stages, 1);
  spec = ScheduleSpecFromConfig(Config(4, 1, ParallelConfig::ONE_F_ONE_B, 32, 2, 8), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kOneFOneB);
  spec = ScheduleSpecFromConfig(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 32, 2, 8), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kInterleaved);
  EXPECT_EQ(spec->virtual_stages, 2);

  absl::StatusOr<std::vector<Action>> table =
      MakeSchedule(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 32, 2, 8), 2, 3);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(*table, Table(*spec, 3));

  spec = ScheduleSpecFromConfig(Config(4, 1, ParallelConfig::ZB_H1, 32, 2, 8), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(spec->micro_batches, 8);
  // One stage has no bubble: ZB_H1 (like GPIPE) runs plain 1F1B there.
  spec = ScheduleSpecFromConfig(Config(1, 1, ParallelConfig::ZB_H1, 32, 2, 8), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kOneFOneB);
  spec = ScheduleSpecFromConfig(Config(4, 2, ParallelConfig::DUALPIPE_V, 32, 2, 16), 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, ScheduleKind::kDualPipeV);
  EXPECT_EQ(spec->virtual_stages, 2);
  table = MakeSchedule(Config(4, 2, ParallelConfig::DUALPIPE_V, 32, 2, 16), 2, 1);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(*table, Table(*spec, 1));
}

// The error of `config` with `data_parallel` ranks contains `message` and a hint.
void ExpectConfigError(const TrainerConfig& config, int data_parallel, const std::string& message) {
  const absl::StatusOr<ScheduleSpec> spec = ScheduleSpecFromConfig(config, data_parallel);
  ASSERT_FALSE(spec.ok()) << message;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(message));
  EXPECT_THAT(spec.status().message(), HasSubstr("\nhint: "));
}

// Every fix that exists, with its numbers, and only those.
TEST(ScheduleTest, BatchSplitHintNamesEveryFix) {
  EXPECT_EQ(BatchSplitHint(16, 16, 4),
            "set train.micro_batch_size to 4, or train.global_batch_size to a multiple of 64 (e.g. "
            "64), or run 1 "
            "data-parallel rank instead of 4");
  EXPECT_EQ(BatchSplitHint(24, 4, 4),
            "set train.micro_batch_size to 3, or train.global_batch_size to a multiple of 16 (e.g. "
            "32), or run 3 "
            "data-parallel ranks instead of 4");
  EXPECT_EQ(
      BatchSplitHint(10, 4, 1),
      "set train.micro_batch_size to 2, or train.global_batch_size to a multiple of 4 (e.g. 12)");
  // 6 samples over 4 ranks: no micro-batch size, and no fewer ranks, splits them.
  EXPECT_EQ(BatchSplitHint(6, 4, 4), "set train.global_batch_size to a multiple of 16 (e.g. 16)");
}

TEST(ScheduleTest, InvalidCombinationsNameTheNumbers) {
  // 6 micro-batches on 4 stages, interleaved.
  ExpectConfigError(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 12, 2, 8), 1,
                    "needs the micro-batches per step, 6, to be a multiple of parallel.pipeline 4");
  ExpectConfigError(
      Config(4, 2, ParallelConfig::GPIPE, 16, 2, 8), 1,
      "the GPipe schedule runs 1 model chunk per rank, but parallel.virtual_stages is 2");
  ExpectConfigError(Config(1, 2, ParallelConfig::ONE_F_ONE_B, 16, 2, 8), 1,
                    "parallel.virtual_stages 2 interleaves model chunks over pipeline ranks, but "
                    "parallel.pipeline "
                    "is 1");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 12, 4, 8), 2,
                    "train.global_batch_size 12 is not a multiple of train.micro_batch_size 4 x "
                    "data-parallel size 2 "
                    "= 8, so the pipeline has no whole number of micro-batches per step\nhint: set "
                    "train.micro_batch_size to 3, or train.global_batch_size to a multiple of 8 "
                    "(e.g. 16), or run 1 "
                    "data-parallel rank instead of 2");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 0, 4, 8), 2,
                    "at least 1 micro-batch, but there are 0");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 8, 0, 8), 2,
                    "train.micro_batch_size 0 x data-parallel size 2 must be at least 1");
  ExpectConfigError(Config(0, 1, ParallelConfig::ONE_F_ONE_B, 8, 1, 8), 1,
                    "parallel.pipeline 0 and parallel.virtual_stages 1 must both be at least 1");
  // ZB-H1: one chunk per rank.
  ExpectConfigError(
      Config(4, 2, ParallelConfig::ZB_H1, 16, 2, 8), 1,
      "the ZB-H1 schedule runs 1 model chunk per rank, but parallel.virtual_stages is 2");
  // DualPipeV: two chunks, two stages, 2 p micro-batches, 2 p equal chunks.
  ExpectConfigError(
      Config(4, 1, ParallelConfig::DUALPIPE_V, 16, 2, 8), 1,
      "the DualPipeV schedule runs 2 model chunks per rank (rank r holds virtual stages r and 2 x "
      "pipeline - 1 - r), but parallel.virtual_stages is 1\nhint: set parallel.virtual_stages to "
      "2");
  ExpectConfigError(
      Config(1, 2, ParallelConfig::DUALPIPE_V, 16, 2, 8), 1,
      "the DualPipeV schedule needs parallel.pipeline 2 or more, but it is 1\nhint: set "
      "parallel.pipeline to 2 or more");
  ExpectConfigError(
      Config(4, 2, ParallelConfig::DUALPIPE_V, 12, 2, 8), 1,
      "the DualPipeV schedule needs at least 2 x parallel.pipeline = 8 micro-batches per step, but "
      "there are 6\nhint: micro-batches per step = train.global_batch_size / "
      "(train.micro_batch_size x "
      "data); make it 8 or more");
  const ScheduleSpec few{
      .kind = ScheduleKind::kDualPipeV, .stages = 3, .micro_batches = 5, .virtual_stages = 2};
  EXPECT_THAT(ValidateScheduleSpec(few).message(),
              HasSubstr("at least 2 x parallel.pipeline = 6 micro-batches"));
  EXPECT_TRUE(
      ValidateScheduleSpec(
          {.kind = ScheduleKind::kDualPipeV, .stages = 3, .micro_batches = 6, .virtual_stages = 2})
          .ok());
  // How the layers split is the stage partition's to say (PartitionStages),
  // whatever the schedule.
  EXPECT_TRUE(ScheduleSpecFromConfig(Config(4, 2, ParallelConfig::DUALPIPE_V, 16, 2, 12), 1).ok());
  TrainerConfig explicit_split = Config(4, 2, ParallelConfig::ONE_F_ONE_B, 16, 2, 12);
  for (int layers : {2, 2, 1, 1, 2, 2, 1, 1})
    explicit_split.mutable_parallel()->add_pipeline_layers(layers);
  EXPECT_TRUE(ScheduleSpecFromConfig(explicit_split, 1).ok());
  explicit_split.mutable_parallel()->set_schedule(ParallelConfig::DUALPIPE_V);
  EXPECT_TRUE(ScheduleSpecFromConfig(explicit_split, 1).ok());
}

}  // namespace
}  // namespace tetra
