// Stage partition: even and explicit splits against layer ranges written out
// by hand, Megatron-LM's interleaved virtual-stage order and DualPipeV's V,
// where the embedding and the head go, the config entry point, and every
// error with its numbers.
#include "pipeline/stage_partition.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

// (first_layer, num_layers) of every virtual stage, in model order.
std::vector<std::pair<int, int>> Ranges(const StagePartition& partition) {
  std::vector<std::pair<int, int>> ranges;
  for (const PipelineStage& s : partition.stages) ranges.emplace_back(s.first_layer, s.num_layers);
  return ranges;
}

StagePartition Partition(int layers, int pp, int v, std::vector<int32_t> counts = {},
                         StagePlacement placement = StagePlacement::kInterleaved) {
  absl::StatusOr<StagePartition> partition = PartitionStages(layers, pp, v, counts, placement);
  EXPECT_TRUE(partition.ok()) << partition.status();
  return partition.ok() ? *partition : StagePartition{};
}

std::string ErrorOf(int layers, int pp, int v, std::vector<int32_t> counts = {}) {
  absl::StatusOr<StagePartition> partition = PartitionStages(layers, pp, v, counts);
  EXPECT_FALSE(partition.ok());
  EXPECT_EQ(partition.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(partition.status().message());
}

TEST(StagePartitionTest, OneStageIsTheWholeModel) {
  const StagePartition p = Partition(5, 1, 1);
  ASSERT_EQ(p.stages.size(), 1u);
  EXPECT_EQ(p.stages[0].first_layer, 0);
  EXPECT_EQ(p.stages[0].num_layers, 5);
  EXPECT_TRUE(p.stages[0].has_embedding);
  EXPECT_TRUE(p.stages[0].has_head);
}

TEST(StagePartitionTest, EvenSplitGivesConsecutiveEqualRanges) {
  const StagePartition p = Partition(12, 4, 1);
  EXPECT_EQ(Ranges(p), (std::vector<std::pair<int, int>>{{0, 3}, {3, 3}, {6, 3}, {9, 3}}));
}

TEST(StagePartitionTest, ExplicitCountsAreTakenInModelOrder) {
  const StagePartition p = Partition(7, 3, 1, {1, 4, 2});
  EXPECT_EQ(Ranges(p), (std::vector<std::pair<int, int>>{{0, 1}, {1, 4}, {5, 2}}));
}

TEST(StagePartitionTest, InterleavedChunksFollowMegatronOrder) {
  // pp 2, v 2, 8 layers: virtual stages 0..3 hold layers 0-1, 2-3, 4-5, 6-7;
  // rank 0 runs virtual stages 0 and 2, rank 1 virtual stages 1 and 3.
  const StagePartition p = Partition(8, 2, 2);
  EXPECT_EQ(VirtualStageIndex(0, 0, 2), 0);
  EXPECT_EQ(VirtualStageIndex(1, 0, 2), 1);
  EXPECT_EQ(VirtualStageIndex(0, 1, 2), 2);
  EXPECT_EQ(VirtualStageIndex(1, 1, 2), 3);
  EXPECT_EQ(p.Stage(0, 0).first_layer, 0);
  EXPECT_EQ(p.Stage(0, 0).num_layers, 2);
  EXPECT_EQ(p.Stage(0, 1).first_layer, 4);
  EXPECT_EQ(p.Stage(0, 1).num_layers, 2);
  EXPECT_EQ(p.Stage(1, 0).first_layer, 2);
  EXPECT_EQ(p.Stage(1, 1).first_layer, 6);
  // Explicit counts are per virtual stage too: rank 1 chunk 0 is the second entry.
  const StagePartition q = Partition(8, 2, 2, {1, 3, 2, 2});
  EXPECT_EQ(q.Stage(1, 0).first_layer, 1);
  EXPECT_EQ(q.Stage(1, 0).num_layers, 3);
  EXPECT_EQ(q.Stage(0, 1).first_layer, 4);
}

TEST(StagePartitionTest, EmbeddingOnTheFirstVirtualStageHeadOnTheLast) {
  const StagePartition p = Partition(8, 2, 2);
  for (int rank = 0; rank < 2; ++rank) {
    for (int chunk = 0; chunk < 2; ++chunk) {
      SCOPED_TRACE(testing::Message() << "rank " << rank << " chunk " << chunk);
      EXPECT_EQ(p.Stage(rank, chunk).has_embedding, rank == 0 && chunk == 0);
      EXPECT_EQ(p.Stage(rank, chunk).has_head, rank == 1 && chunk == 1);
    }
  }
}

// A rank's chunks in model order: rank 1 of 2 with 2 chunks of 2 layers
// holds layers 2-3 and 6-7.
TEST(StagePartitionTest, ChunksOfARankInModelOrder) {
  const std::vector<PipelineStage> chunks = Partition(8, 2, 2).Chunks(1);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].first_layer, 2);
  EXPECT_EQ(chunks[1].first_layer, 6);
  EXPECT_EQ(chunks[1].num_layers, 2);
  EXPECT_TRUE(chunks[1].has_head);
}

TEST(StagePartitionTest, VShapePlacesChunkOneBackUpTheRanks) {
  // pp 2, v 2, 8 layers, V placement: virtual stages 0..3 hold layers 0-1,
  // 2-3, 4-5, 6-7 as before, but rank 0 holds stages 0 and 3 (the embedding
  // and the head), rank 1 stages 1 and 2.
  const StagePartition p = Partition(8, 2, 2, {}, StagePlacement::kVShape);
  EXPECT_EQ(p.placement, StagePlacement::kVShape);
  EXPECT_EQ(Ranges(p), (std::vector<std::pair<int, int>>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  const std::vector<PipelineStage> rank0 = p.Chunks(0), rank1 = p.Chunks(1);
  ASSERT_EQ(rank0.size(), 2u);
  ASSERT_EQ(rank1.size(), 2u);
  EXPECT_EQ(rank0[0].first_layer, 0);
  EXPECT_EQ(rank0[1].first_layer, 6);
  EXPECT_EQ(rank1[0].first_layer, 2);
  EXPECT_EQ(rank1[1].first_layer, 4);
  EXPECT_TRUE(rank0[0].has_embedding);
  EXPECT_TRUE(rank0[1].has_head);
  EXPECT_FALSE(rank1[0].has_embedding || rank1[0].has_head || rank1[1].has_embedding ||
               rank1[1].has_head);
}

TEST(StagePartitionTest, VShapeOnFourRanks) {
  // pp 4, v 2, explicit counts per virtual stage in model order: rank r
  // holds stages r and 7 - r, in model order.
  const std::vector<int32_t> counts = {1, 2, 3, 4, 4, 3, 2, 1};  // 20 layers
  const StagePartition p = Partition(20, 4, 2, counts, StagePlacement::kVShape);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(testing::Message() << "rank " << rank);
    EXPECT_EQ(VirtualStageIndex(rank, 0, 4, StagePlacement::kVShape), rank);
    EXPECT_EQ(VirtualStageIndex(rank, 1, 4, StagePlacement::kVShape), 7 - rank);
    for (int chunk = 0; chunk < 2; ++chunk) {
      const int stage = VirtualStageIndex(rank, chunk, 4, StagePlacement::kVShape);
      const ChunkLocation at = LocateVirtualStage(stage, 4, StagePlacement::kVShape);
      EXPECT_EQ(at.pp_rank, rank);
      EXPECT_EQ(at.chunk, chunk);
      EXPECT_EQ(p.Stage(rank, chunk).first_layer, p.stages[stage].first_layer);
      EXPECT_EQ(p.Stage(rank, chunk).num_layers, counts[stage]);
    }
    const std::vector<PipelineStage> chunks = p.Chunks(rank);
    EXPECT_LT(chunks[0].first_layer, chunks[1].first_layer);
  }
  // Rank 3 holds the two middle stages, 3 and 4: layers 6-9 and 10-13.
  EXPECT_EQ(p.Stage(3, 0).first_layer, 6);
  EXPECT_EQ(p.Stage(3, 1).first_layer, 10);
  EXPECT_EQ(p.Stage(0, 1).first_layer, 19);
  EXPECT_TRUE(p.Stage(0, 1).has_head);
  // The interleaved placement of the same split: rank 0 chunk 1 is stage 4.
  const StagePartition q = Partition(20, 4, 2, counts);
  EXPECT_EQ(q.Stage(0, 1).first_layer, 10);
  EXPECT_EQ(LocateVirtualStage(5, 4).pp_rank, 1);
}

TEST(StagePartitionTest, DualPipeVConfigGetsTheVShape) {
  TrainerConfig config;
  config.mutable_model()->set_num_hidden_layers(8);
  config.mutable_parallel()->set_pipeline(2);
  config.mutable_parallel()->set_virtual_stages(2);
  absl::StatusOr<StagePartition> p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->placement, StagePlacement::kInterleaved);
  EXPECT_EQ(p->Chunks(0)[1].first_layer, 4);
  config.mutable_parallel()->set_schedule(ParallelConfig::DUALPIPE_V);
  p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->placement, StagePlacement::kVShape);
  EXPECT_EQ(p->Chunks(0)[1].first_layer, 6);
  EXPECT_TRUE(p->Chunks(0)[1].has_head);
  EXPECT_EQ(p->Chunks(1)[1].first_layer, 4);
  config.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
  EXPECT_EQ(PartitionStages(config)->placement, StagePlacement::kInterleaved);
}

TEST(StagePartitionTest, ReadsTheConfig) {
  TrainerConfig config;
  config.mutable_model()->set_num_hidden_layers(6);
  config.mutable_parallel()->set_pipeline(2);
  for (int32_t n : {4, 2}) config.mutable_parallel()->add_pipeline_layers(n);
  absl::StatusOr<StagePartition> p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Ranges(*p), (std::vector<std::pair<int, int>>{{0, 4}, {4, 2}}));
  config.mutable_parallel()->clear_pipeline_layers();
  config.mutable_parallel()->set_virtual_stages(2);
  EXPECT_THAT(std::string(PartitionStages(config).status().message()),
              HasSubstr("model.num_hidden_layers = 6 does not split evenly over 4"));
}

TEST(StagePartitionTest, UnevenSplitIsAnErrorWithAHint) {
  const std::string error = ErrorOf(10, 2, 2);
  EXPECT_THAT(error, HasSubstr("model.num_hidden_layers = 10"));
  EXPECT_THAT(error, HasSubstr("4 virtual pipeline stages (pipeline 2 x virtual_stages 2)"));
  EXPECT_THAT(error, HasSubstr("hint: use a multiple of 4"));
  EXPECT_THAT(ErrorOf(2, 4, 1), HasSubstr("model.num_hidden_layers = 2 does not split evenly"));
}

TEST(StagePartitionTest, NonPositiveSizesAreErrors) {
  EXPECT_THAT(ErrorOf(4, 0, 1), HasSubstr("parallel.pipeline is 0"));
  EXPECT_THAT(ErrorOf(4, 2, 0), HasSubstr("parallel.virtual_stages is 0"));
}

TEST(StagePartitionTest, WrongNumberOfCountsIsAnError) {
  const std::string error = ErrorOf(8, 2, 2, {4, 4});
  EXPECT_THAT(error, HasSubstr("parallel.pipeline_layers has 2 entries"));
  EXPECT_THAT(error, HasSubstr("4 virtual pipeline stages"));
}

// A stage of no layers holds only the embedding or only the head (as
// Megatron-LM's layouts put DeepSeek-V3's loss on a stage of its own).
TEST(StagePartitionTest, StagesMayHoldNoLayerButNotFewer) {
  absl::StatusOr<StagePartition> p = PartitionStages(4, 2, 1, std::vector<int32_t>{4, 0});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Ranges(*p), (std::vector<std::pair<int, int>>{{0, 4}, {4, 0}}));
  EXPECT_TRUE(p->stages[1].has_head);
  EXPECT_THAT(ErrorOf(4, 2, 1, {5, -1}), HasSubstr("parallel.pipeline_layers[1] is -1"));
}

// Megatron-LM's first and last stages' layers, the rest even: DeepSeek-V3's
// 61 layers at pipeline 16 (first 4, last 1, 4 on each of the 14 others) and
// at 16 x 2 chunks under DualPipeV (first 1, last 0: the head and MTP alone).
TEST(StagePartitionTest, FirstAndLastStageLayersSplitTheRestEvenly) {
  TrainerConfig config;
  config.mutable_model()->set_num_hidden_layers(61);
  ParallelConfig& parallel = *config.mutable_parallel();
  parallel.set_pipeline(16);
  parallel.set_pipeline_first_stage_layers(4);
  parallel.set_pipeline_last_stage_layers(1);
  absl::StatusOr<StagePartition> p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stages.front().num_layers, 4);
  EXPECT_EQ(p->stages.back().num_layers, 1);
  EXPECT_EQ(p->stages.back().first_layer, 60);
  for (int s = 1; s < 15; ++s) EXPECT_EQ(p->stages[s].num_layers, 4) << s;

  parallel.set_schedule(ParallelConfig::DUALPIPE_V);
  parallel.set_virtual_stages(2);
  parallel.set_pipeline_first_stage_layers(1);
  parallel.set_pipeline_last_stage_layers(0);
  p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Chunks(0)[0].num_layers, 1);  // rank 0: the embedding and 1 layer,
  EXPECT_EQ(p->Chunks(0)[1].num_layers, 0);  // and the head alone
  EXPECT_TRUE(p->Chunks(0)[1].has_head);
  EXPECT_EQ(p->Chunks(7)[1].num_layers, 2);

  // Only the last given: the others share the rest.
  parallel.clear_pipeline_first_stage_layers();
  parallel.set_pipeline_last_stage_layers(30);
  p = PartitionStages(config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stages.front().num_layers, 1);
  EXPECT_EQ(p->stages.back().num_layers, 30);
}

TEST(StagePartitionTest, FirstAndLastStageLayersThatLeaveAnUnevenRestAreErrors) {
  TrainerConfig config;
  config.mutable_model()->set_num_hidden_layers(61);
  ParallelConfig& parallel = *config.mutable_parallel();
  parallel.set_pipeline(16);
  parallel.set_pipeline_first_stage_layers(3);
  parallel.set_pipeline_last_stage_layers(3);
  std::string error(PartitionStages(config).status().message());
  EXPECT_THAT(
      error,
      HasSubstr("parallel.pipeline_first_stage_layers 3 and pipeline_last_stage_layers 3 leave 55 "
                "of model.num_hidden_layers 61 to 14 other virtual stages"));
  EXPECT_THAT(error,
              HasSubstr("hint: choose them so that the layers they leave are a multiple of 14"));
  parallel.set_pipeline_first_stage_layers(60);
  EXPECT_THAT(std::string(PartitionStages(config).status().message()),
              HasSubstr("add up to more than"));
  parallel.set_pipeline_first_stage_layers(4);
  parallel.add_pipeline_layers(61);
  EXPECT_THAT(std::string(PartitionStages(config).status().message()),
              HasSubstr("both say how to split"));
  parallel.clear_pipeline_layers();
  parallel.set_pipeline(1);
  EXPECT_THAT(std::string(PartitionStages(config).status().message()),
              HasSubstr("need two or more virtual stages"));
}

TEST(StagePartitionTest, CountsMustSumToTheLayers) {
  const std::string error = ErrorOf(8, 2, 1, {3, 4});
  EXPECT_THAT(error, HasSubstr("sums to 7 layers but model.num_hidden_layers is 8"));
  EXPECT_THAT(error, HasSubstr("hint:"));
}

}  // namespace
}  // namespace tetra
