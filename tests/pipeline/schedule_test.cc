// Schedule tables: the compute orders of GPipe, 1F1B and Megatron-LM's
// interleaved 1F1B against orders written out by hand, a whole 1F1B table with
// its messages placed by hand from the ideal timeline, the config entry point,
// and the errors for combinations that cannot run. Everything compares exactly.
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

// "F0 F1 B0 ...": the computations of `table`, with a chunk letter (a, b, ...)
// when `chunks` > 1.
std::string ComputeCells(const std::vector<Action>& table, int chunks = 1) {
  std::vector<std::string> cells;
  for (const Action& a : table) {
    if (!IsCompute(a.type)) continue;
    std::string cell = absl::StrCat(a.type == ActionType::kForward ? "F" : "B", a.micro_batch);
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
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(ComputeCells(Table(spec, rank)), "F0 F1 F2 B0 B1 B2");
}

TEST(ScheduleTest, OneFOneBWarmsUpWithTheStagesAfterTheRank) {
  const ScheduleSpec spec{.kind = ScheduleKind::kOneFOneB, .stages = 4, .micro_batches = 6};
  EXPECT_EQ(ComputeCells(Table(spec, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");  // 3 warm-up forwards
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
  const ScheduleSpec spec{.kind = ScheduleKind::kInterleaved, .stages = 2, .micro_batches = 4, .virtual_stages = 2};
  EXPECT_EQ(ComputeCells(Table(spec, 0), 2), "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a");
  EXPECT_EQ(ComputeCells(Table(spec, 1), 2), "F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a");
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
  const ScheduleSpec spec{.kind = ScheduleKind::kInterleaved, .stages = 2, .micro_batches = 2, .virtual_stages = 2};
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
  const ScheduleSpec spec{.kind = ScheduleKind::kInterleaved, .stages = 4, .micro_batches = 8, .virtual_stages = 3};
  absl::StatusOr<std::vector<std::vector<Action>>> all = BuildAllSchedules(spec);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(Table(spec, rank), (*all)[rank]) << "rank " << rank;
}

TrainerConfig Config(int pipeline, int virtual_stages, ParallelConfig::Schedule schedule, int global_batch,
                     int micro_batch, int layers) {
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
  absl::StatusOr<ScheduleSpec> spec = ScheduleSpecFromConfig(Config(4, 1, ParallelConfig::GPIPE, 32, 2, 8), 2);
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

  absl::StatusOr<std::vector<Action>> table = MakeSchedule(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 32, 2, 8), 2, 3);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(*table, Table(*spec, 3));
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
            "set train.micro_batch_size to 4, or train.global_batch_size to a multiple of 64 (e.g. 64), or run 1 "
            "data-parallel rank instead of 4");
  EXPECT_EQ(BatchSplitHint(24, 4, 4),
            "set train.micro_batch_size to 3, or train.global_batch_size to a multiple of 16 (e.g. 32), or run 3 "
            "data-parallel ranks instead of 4");
  EXPECT_EQ(BatchSplitHint(10, 4, 1),
            "set train.micro_batch_size to 2, or train.global_batch_size to a multiple of 4 (e.g. 12)");
  // 6 samples over 4 ranks: no micro-batch size, and no fewer ranks, splits them.
  EXPECT_EQ(BatchSplitHint(6, 4, 4), "set train.global_batch_size to a multiple of 16 (e.g. 16)");
}

TEST(ScheduleTest, InvalidCombinationsNameTheNumbers) {
  // 6 micro-batches on 4 stages, interleaved.
  ExpectConfigError(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 12, 2, 8), 1,
                    "needs the micro-batches per step, 6, to be a multiple of parallel.pipeline 4");
  ExpectConfigError(Config(4, 2, ParallelConfig::ONE_F_ONE_B, 16, 2, 12), 1,
                    "splits model.num_hidden_layers 12 into parallel.pipeline 4 x parallel.virtual_stages 2 = 8 "
                    "equal chunks, but 12 is not a multiple of 8");
  ExpectConfigError(Config(4, 2, ParallelConfig::GPIPE, 16, 2, 8), 1,
                    "the GPipe schedule runs 1 model chunk per rank, but parallel.virtual_stages is 2");
  ExpectConfigError(Config(1, 2, ParallelConfig::ONE_F_ONE_B, 16, 2, 8), 1,
                    "parallel.virtual_stages 2 interleaves model chunks over pipeline ranks, but parallel.pipeline "
                    "is 1");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 12, 4, 8), 2,
                    "train.global_batch_size 12 is not a multiple of train.micro_batch_size 4 x data-parallel size 2 "
                    "= 8, so the pipeline has no whole number of micro-batches per step\nhint: set "
                    "train.micro_batch_size to 3, or train.global_batch_size to a multiple of 8 (e.g. 16), or run 1 "
                    "data-parallel rank instead of 2");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 0, 4, 8), 2, "at least 1 micro-batch, but there are 0");
  ExpectConfigError(Config(2, 1, ParallelConfig::ONE_F_ONE_B, 8, 0, 8), 2,
                    "train.micro_batch_size 0 x data-parallel size 2 must be at least 1");
  ExpectConfigError(Config(0, 1, ParallelConfig::ONE_F_ONE_B, 8, 1, 8), 1,
                    "parallel.pipeline 0 and parallel.virtual_stages 1 must both be at least 1");
  // An explicit pipeline_layers split skips the even-chunk rule.
  TrainerConfig explicit_split = Config(4, 2, ParallelConfig::ONE_F_ONE_B, 16, 2, 12);
  for (int layers : {2, 2, 1, 1, 2, 2, 1, 1}) explicit_split.mutable_parallel()->add_pipeline_layers(layers);
  EXPECT_TRUE(ScheduleSpecFromConfig(explicit_split, 1).ok());
}

}  // namespace
}  // namespace tetra
