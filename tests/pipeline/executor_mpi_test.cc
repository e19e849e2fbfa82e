// The pipeline executor over MPI: every rank is one stage of an 8-layer GQA
// model (a pipeline of the world's size), runs its GPipe or 1F1B table for 4
// micro-batches, and compares with the whole model run in-process on the
// same micro-batches: the last stage's loss sum and every parameter's
// gradient (matched by name) must be equal exactly, since each stage runs the
// same ops on the same numbers in the same order and messages carry fp32
// bits unchanged. Also checks the readiness callback (descending, ending at
// 0) and that the measured wait time lies within the step time.
#include <algorithm>
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
constexpr int kMicroBatches = 4, kLayers = 8;  // 8 layers: stages of 2, 4 and 8 ranks
constexpr uint64_t kSeed = 99;

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// Token ids of micro-batch `mb`: inputs (offset 0) or targets (offset 1).
void Tokens(int mb, int offset, int32_t* out) {
  for (int64_t i = 0; i < kBatch * kSeq; ++i) out[i] = static_cast<int32_t>((5 * i + 3 * mb + offset) % 13);
}

void CheckPipelineMatchesWholeModel(ScheduleKind kind) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  const ModelConfig config = testing::TinyGqaConfig(/*tie_word_embeddings=*/false, kLayers);
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);

  LlamaModel whole(config, kSeed);
  double want_loss = 0;
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    Tokens(mb, 0, inputs.data());
    Tokens(mb, 1, targets.data());
    want_loss += whole.ForwardBackward(inputs.data(), targets.data(), kBatch, kSeq, grad_scale);
  }

  auto partition = PartitionStages(kLayers, stages, 1);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LlamaModel stage(config, kSeed, ModelParallelism{.stage = partition->Stage(rank, 0)});
  auto actions = BuildSchedule({.kind = kind, .stages = stages, .micro_batches = kMicroBatches}, rank);
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
  const ScheduleSpec spec{.kind = kind, .stages = stages, .micro_batches = kMicroBatches};
  auto tables = BuildAllSchedules(spec);
  ASSERT_TRUE(tables.ok()) << tables.status();
  auto report = CheckSchedule(spec, *tables);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(executor.peak_activations(), report->ranks[rank].peak_activations) << "rank " << rank;
  EXPECT_LE(executor.peak_activations(), ActivationBound(spec, rank)) << "rank " << rank;

  int mismatches = 0;
  for (const Parameter& p : stage.parameters().all()) {
    const Parameter* w = whole.parameters().Find(p.name);
    ASSERT_NE(w, nullptr) << p.name;
    ASSERT_EQ(p.grad.numel(), w->grad.numel()) << p.name;
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      if (p.grad.f32()[i] != w->grad.f32()[i] && ++mismatches <= 3) {
        ADD_FAILURE() << "rank " << rank << " " << p.name << " element " << i << ": "
                      << p.grad.f32()[i] << " vs " << w->grad.f32()[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(PipelineExecutor, GPipeMatchesWholeModel) { CheckPipelineMatchesWholeModel(ScheduleKind::kGPipe); }

TEST(PipelineExecutor, OneFOneBMatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kOneFOneB);
}

}  // namespace
}  // namespace tetra
