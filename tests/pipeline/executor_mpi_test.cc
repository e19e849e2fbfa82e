// The pipeline executor over MPI: every rank is one stage (or with
// interleaving two chunks) of a 16-layer GQA model (a pipeline of the world's
// size), runs its GPipe, 1F1B or interleaved 1F1B table for 8 micro-batches,
// and compares with the whole model run in-process on the same micro-batches:
// the last stage's loss sum and every parameter's gradient (matched by name)
// must be equal exactly, since each stage runs the same ops on the same
// numbers in the same order and messages carry fp32 bits unchanged. A tied
// embedding's two copies (first and last stage) summed over the embedding
// group must equal the whole model's gradient up to the order of that one
// addition. Evaluation through the pipeline gives the whole model's loss
// exactly. Also checks the readiness callback (descending, ending at 0),
// that the measured wait time lies within the step time, and the measured
// peak of live activations against the schedule checker.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"
#include "model/llama_model.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "tests/testing/tiny_models.h"

namespace tetra {
namespace {

constexpr double kTimeoutS = 30;
constexpr int64_t kBatch = 2, kSeq = 5;
// 16 layers split over 2, 4 or 8 ranks with up to 2 chunks each; 8
// micro-batches, a multiple of every pipeline size, as interleaving needs.
constexpr int kMicroBatches = 8, kLayers = 16;
constexpr uint64_t kSeed = 99;
// The tied table's gradient: the whole model accumulates the head's and the
// embedding's parts into one buffer, the pipeline sums two buffers, so the
// two differ by the rounding of that order (values are O(1e-2)).
constexpr float kTiedGradTolerance = 1e-7f;

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// Token ids of micro-batch `mb`: inputs (offset 0) or targets (offset 1).
void Tokens(int mb, int offset, int32_t* out) {
  for (int64_t i = 0; i < kBatch * kSeq; ++i) out[i] = static_cast<int32_t>((5 * i + 3 * mb + offset) % 13);
}

void CheckPipelineMatchesWholeModel(ScheduleKind kind, int virtual_stages = 1, bool tie = false) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  const ModelConfig config = testing::TinyGqaConfig(tie, kLayers);
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);

  LlamaModel whole(config, kSeed);
  double want_loss = 0;
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    Tokens(mb, 0, inputs.data());
    Tokens(mb, 1, targets.data());
    want_loss += whole.ForwardBackward(inputs.data(), targets.data(), kBatch, kSeq, grad_scale);
  }

  auto partition = PartitionStages(kLayers, stages, virtual_stages);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LlamaModel stage(config, kSeed, ModelParallelism{.chunks = partition->Chunks(rank)});
  const ScheduleSpec spec{.kind = kind,
                          .stages = stages,
                          .micro_batches = kMicroBatches,
                          .virtual_stages = virtual_stages};
  auto actions = BuildSchedule(spec, rank);
  ASSERT_TRUE(actions.ok()) << actions.status();
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);

  std::vector<int64_t> ready;
  const double got_loss = executor.Step(
      [](int mb, int32_t* in, int32_t* out) {
        Tokens(mb, 0, in);
        Tokens(mb, 1, out);
      },
      grad_scale, [&](int64_t offset) { ready.push_back(offset); });

  EXPECT_EQ(got_loss, rank == stages - 1 ? want_loss : 0.0) << "rank " << rank;
  ASSERT_FALSE(ready.empty());
  EXPECT_TRUE(std::is_sorted(ready.rbegin(), ready.rend()));
  EXPECT_EQ(ready.back(), 0);
  EXPECT_GE(executor.wait_seconds(), 0.0);
  EXPECT_LE(executor.wait_seconds(), executor.step_seconds());
  // Measured peak of live activations = the checker's simulated peak, within its bound.
  auto tables = BuildAllSchedules(spec);
  ASSERT_TRUE(tables.ok()) << tables.status();
  auto report = CheckSchedule(spec, *tables);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(executor.peak_activations(), report->ranks[rank].peak_activations) << "rank " << rank;
  EXPECT_LE(executor.peak_activations(), ActivationBound(spec, rank)) << "rank " << rank;

  // The tied table's copies on the first and last stage sum their gradients.
  Parameter* tied = stage.tied_embedding_copy();
  EXPECT_EQ(tied != nullptr, tie && (rank == 0 || rank == stages - 1)) << "rank " << rank;
  std::vector<int> embedding_group = {0, stages - 1};
  if (rank != 0 && rank != stages - 1) embedding_group = {rank};
  std::unique_ptr<Communicator> embd = world.Split(embedding_group, "embd");
  if (tied) {
    embd->AllReduce(tied->grad.raw(), tied->grad.raw(), tied->grad.numel(), DType::kF32, ReduceOp::kSum);
  }

  int mismatches = 0;
  for (const Parameter& p : stage.parameters().all()) {
    const Parameter* w = whole.parameters().Find(p.name);
    ASSERT_NE(w, nullptr) << p.name;
    ASSERT_EQ(p.grad.numel(), w->grad.numel()) << p.name;
    const float tolerance = &p == tied ? kTiedGradTolerance : 0.0f;
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      if (std::abs(p.grad.f32()[i] - w->grad.f32()[i]) > tolerance && ++mismatches <= 3) {
        ADD_FAILURE() << "rank " << rank << " " << p.name << " element " << i << ": "
                      << p.grad.f32()[i] << " vs " << w->grad.f32()[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Evaluation through the pipeline (forward only, no schedule) gives the whole
// model's loss sum exactly, plain and interleaved.
void CheckEvaluationMatchesWholeModel(int virtual_stages) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  const ModelConfig config = testing::TinyGqaConfig(/*tie_word_embeddings=*/true, kLayers);
  LlamaModel whole(config, kSeed);
  double want_loss = 0;
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    Tokens(mb, 0, inputs.data());
    Tokens(mb, 1, targets.data());
    want_loss += whole.ForwardLoss(inputs.data(), targets.data(), kBatch, kSeq);
  }
  auto partition = PartitionStages(kLayers, stages, virtual_stages);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LlamaModel stage(config, kSeed, ModelParallelism{.chunks = partition->Chunks(rank)});
  auto actions = BuildSchedule({.kind = virtual_stages > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB,
                                .stages = stages,
                                .micro_batches = kMicroBatches,
                                .virtual_stages = virtual_stages},
                               rank);
  ASSERT_TRUE(actions.ok()) << actions.status();
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);
  const double got_loss = executor.EvaluateLoss(
      [](int mb, int32_t* in, int32_t* out) {
        Tokens(mb, 0, in);
        Tokens(mb, 1, out);
      },
      kMicroBatches);
  EXPECT_EQ(got_loss, rank == stages - 1 ? want_loss : 0.0) << "rank " << rank;
}

TEST(PipelineExecutor, EvaluationMatchesWholeModel) {
  CheckEvaluationMatchesWholeModel(1);
  CheckEvaluationMatchesWholeModel(2);
}

TEST(PipelineExecutor, GPipeMatchesWholeModel) { CheckPipelineMatchesWholeModel(ScheduleKind::kGPipe); }

TEST(PipelineExecutor, OneFOneBMatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kOneFOneB);
}

TEST(PipelineExecutor, InterleavedTwoChunksMatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kInterleaved, /*virtual_stages=*/2);
}

TEST(PipelineExecutor, TiedEmbeddingCopiesSumToWholeModelGradient) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kOneFOneB, 1, /*tie=*/true);
  CheckPipelineMatchesWholeModel(ScheduleKind::kInterleaved, 2, /*tie=*/true);
}

}  // namespace
}  // namespace tetra
