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
// peak of live activations against the schedule checker. The bubble: every
// rank's record of what it did (executed(): computations, sends, and
// receives where it waited), replayed together under the checker's
// equal-stage-time model, has the table's idle time on every rank and the
// textbook bubble (p - 1) / (v m + p - 1); whole time units, so exactly, and
// independent of how fast or loaded the machine is.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/whole_model.h"

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
  for (int64_t i = 0; i < kBatch * kSeq; ++i)
    out[i] = static_cast<int32_t>((5 * i + 3 * mb + offset) % 13);
}

// The executor's loader of micro-batch mb.
absl::Status LoadTokens(int mb, int32_t* inputs, int32_t* targets) {
  Tokens(mb, 0, inputs);
  Tokens(mb, 1, targets);
  return absl::OkStatus();
}

// Gathers every rank's record (each as long as its table) and checks its
// replay against the tables' timeline and the textbook bubble, on every rank.
void ExpectReplayHasTheTablesBubble(const ScheduleSpec& spec,
                                    const std::vector<std::vector<Action>>& tables,
                                    const std::vector<Action>& executed) {
  Communicator& world = World();
  const int rank = world.rank();
  // Each action is 4 ints (type, micro-batch, chunk, peer) at its rank's
  // offset; the other ranks' places hold zeros, so a sum gathers them.
  constexpr int kFields = 4;
  std::vector<size_t> offset(spec.stages + 1, 0);
  for (int r = 0; r < spec.stages; ++r) offset[r + 1] = offset[r] + kFields * tables[r].size();
  EXPECT_EQ(executed.size(), tables[rank].size())
      << "rank " << rank << " recorded another number of actions";
  std::vector<int32_t> fields(offset.back(), 0);
  for (size_t i = 0; i < std::min(executed.size(), tables[rank].size()); ++i) {
    const Action& a = executed[i];
    int32_t* out = &fields[offset[rank] + kFields * i];
    out[0] = static_cast<int32_t>(a.type);
    out[1] = a.micro_batch;
    out[2] = a.chunk;
    out[3] = a.peer;
  }
  const Tensor fields_view =
      Tensor::View(fields.data(), {static_cast<int64_t>(fields.size())}, DType::kI32);
  world.AllReduce(fields_view, fields_view, ReduceOp::kSum);
  std::vector<std::vector<Action>> records(spec.stages);
  for (int r = 0; r < spec.stages; ++r) {
    for (size_t i = offset[r]; i < offset[r + 1]; i += kFields) {
      records[r].push_back(
          {static_cast<ActionType>(fields[i]), fields[i + 1], fields[i + 2], fields[i + 3]});
    }
  }
  absl::StatusOr<ScheduleReport> replay = SimulateTimeline(spec, records);
  ASSERT_TRUE(replay.ok()) << replay.status();
  absl::StatusOr<ScheduleReport> table = CheckSchedule(spec, tables);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(replay->step_time, table->step_time);
  for (int r = 0; r < spec.stages; ++r) {
    EXPECT_EQ(replay->ranks[r].busy_time, table->ranks[r].busy_time) << "rank " << r;
    EXPECT_EQ(replay->ranks[r].idle_time, table->ranks[r].idle_time) << "rank " << r;
  }
  EXPECT_DOUBLE_EQ(replay->BubbleFraction(), IdealBubbleFraction(spec));
}

void CheckPipelineMatchesWholeModel(ScheduleKind kind, int virtual_stages = 1, bool tie = false) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  const ModelConfig config = testing::TinyGqaConfig(tie, kLayers);
  const ScheduleSpec spec{.kind = kind,
                          .stages = stages,
                          .micro_batches = kMicroBatches,
                          .virtual_stages = virtual_stages};
  if (!ValidateScheduleSpec(spec).ok()) GTEST_SKIP() << ValidateScheduleSpec(spec);
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);

  LanguageModel whole(config, kSeed);
  double want_loss = 0;
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    Tokens(mb, 0, inputs.data());
    Tokens(mb, 1, targets.data());
    want_loss +=
        testing::ForwardBackward(whole, inputs.data(), targets.data(), kBatch, kSeq, grad_scale);
  }

  // DualPipeV's V: rank 0 holds the first and the last virtual stage.
  const bool v_shape = kind == ScheduleKind::kDualPipeV;
  const int head_rank = v_shape ? 0 : stages - 1;
  auto partition =
      PartitionStages(kLayers, stages, virtual_stages, {},
                      v_shape ? StagePlacement::kVShape : StagePlacement::kInterleaved);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LanguageModel stage(config, kSeed, ModelParallelism{.chunks = partition->Chunks(rank)});
  auto actions = BuildSchedule(spec, rank);
  ASSERT_TRUE(actions.ok()) << actions.status();
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);

  std::vector<int64_t> ready;
  const absl::StatusOr<double> got_loss =
      executor.Step(LoadTokens, grad_scale, [&](int64_t offset) { ready.push_back(offset); });
  ASSERT_TRUE(got_loss.ok()) << got_loss.status();

  EXPECT_EQ(*got_loss, rank == head_rank ? want_loss : 0.0) << "rank " << rank;
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
  ExpectReplayHasTheTablesBubble(spec, *tables, executor.executed());

  // The tied table's copies on the first and last stage sum their gradients
  // (in the V one rank holds both stages and the table once).
  Parameter* tied = stage.embedding_copy();
  EXPECT_EQ(tied != nullptr, tie && !v_shape && (rank == 0 || rank == stages - 1))
      << "rank " << rank;
  std::vector<int> embedding_group = {0, stages - 1};
  if (rank != 0 && rank != stages - 1) embedding_group = {rank};
  std::unique_ptr<Communicator> embd = world.Split(embedding_group, "embd");
  if (tied) {
    embd->AllReduce(tied->grad, tied->grad, ReduceOp::kSum);
  }

  int mismatches = 0;
  for (const Parameter& p : stage.parameters().all()) {
    const Parameter* w = whole.parameters().Find(p.name);
    ASSERT_NE(w, nullptr) << p.name;
    ASSERT_EQ(p.grad.numel(), w->grad.numel()) << p.name;
    // A tied table adds its head's and its lookup's contributions in another
    // order than the whole model (the V's rank 0 runs all of one micro-batch's
    // head before the lookups): round-off only.
    const bool tied_table = tie && p.name == "model.embed_tokens.weight";
    const float tolerance = tied_table ? kTiedGradTolerance : 0.0f;
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
void CheckEvaluationMatchesWholeModel(int virtual_stages, ScheduleKind kind) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  const ModelConfig config = testing::TinyGqaConfig(/*tie_word_embeddings=*/true, kLayers);
  LanguageModel whole(config, kSeed);
  double want_loss = 0;
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    Tokens(mb, 0, inputs.data());
    Tokens(mb, 1, targets.data());
    want_loss += testing::ForwardLoss(whole, inputs.data(), targets.data(), kBatch, kSeq);
  }
  const ScheduleSpec spec{.kind = kind,
                          .stages = stages,
                          .micro_batches = kMicroBatches,
                          .virtual_stages = virtual_stages};
  if (!ValidateScheduleSpec(spec).ok()) return;  // DualPipeV needs more micro-batches on 8 ranks
  const bool v_shape = kind == ScheduleKind::kDualPipeV;
  auto partition =
      PartitionStages(kLayers, stages, virtual_stages, {},
                      v_shape ? StagePlacement::kVShape : StagePlacement::kInterleaved);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LanguageModel stage(config, kSeed, ModelParallelism{.chunks = partition->Chunks(rank)});
  auto actions = BuildSchedule(spec, rank);
  ASSERT_TRUE(actions.ok()) << actions.status();
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);
  const absl::StatusOr<double> got_loss = executor.EvaluateLoss(LoadTokens, kMicroBatches);
  ASSERT_TRUE(got_loss.ok()) << got_loss.status();
  EXPECT_EQ(*got_loss, rank == (v_shape ? 0 : stages - 1) ? want_loss : 0.0) << "rank " << rank;
}

TEST(PipelineExecutor, EvaluationMatchesWholeModel) {
  CheckEvaluationMatchesWholeModel(1, ScheduleKind::kOneFOneB);
  CheckEvaluationMatchesWholeModel(2, ScheduleKind::kInterleaved);
  CheckEvaluationMatchesWholeModel(2, ScheduleKind::kDualPipeV);
}

TEST(PipelineExecutor, GPipeMatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kGPipe);
}

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

// The zero-bubble schedules: each backward split into B and a later W (the
// weight gradients then reach every parameter in the same micro-batch order,
// so bit for bit), and DualPipeV's V, whose turn on the last rank passes no
// message, with the tied table held once on rank 0.
TEST(PipelineExecutor, ZeroBubbleH1MatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kZeroBubbleH1);
}

TEST(PipelineExecutor, DualPipeVMatchesWholeModel) {
  CheckPipelineMatchesWholeModel(ScheduleKind::kDualPipeV, /*virtual_stages=*/2);
  CheckPipelineMatchesWholeModel(ScheduleKind::kDualPipeV, 2, /*tie=*/true);
}

// Without pipeline parallelism a step is the one-stage table run by the same
// executor: the whole model's loss and gradients, bit for bit, under 1F1B
// (each forward, then its backward) and GPipe, with no message moved.
TEST(PipelineExecutor, OneStageScheduleIsTheWholeModel) {
  const ModelConfig config = testing::TinyGqaConfig(/*tie_word_embeddings=*/true, kLayers);
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe}) {
    SCOPED_TRACE(ScheduleKindName(kind));
    LanguageModel whole(config, kSeed), stage(config, kSeed);
    double want_loss = 0;
    std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      ASSERT_TRUE(LoadTokens(mb, inputs.data(), targets.data()).ok());
      want_loss +=
          testing::ForwardBackward(whole, inputs.data(), targets.data(), kBatch, kSeq, grad_scale);
    }
    auto actions = BuildSchedule({.kind = kind, .stages = 1, .micro_batches = kMicroBatches}, 0);
    ASSERT_TRUE(actions.ok()) << actions.status();
    SelfCommunicator pipeline(World().rank(), "pp");
    PipelineExecutor executor(stage, pipeline, *actions, kBatch, kSeq);
    const absl::StatusOr<double> loss = executor.Step(LoadTokens, grad_scale);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(*loss, want_loss);
    EXPECT_EQ(executor.message_buffers(), 0);
    for (const Parameter& p : stage.parameters().all()) {
      const Parameter* w = whole.parameters().Find(p.name);
      ASSERT_NE(w, nullptr) << p.name;
      EXPECT_EQ(std::memcmp(p.grad.raw(), w->grad.raw(), p.grad.nbytes()), 0) << p.name;
    }
  }
}

// A micro-batch that fails to load on the first stage fails that rank's
// step with its error, after the table has run to the end, so the other
// stages finish theirs instead of waiting for its messages.
TEST(PipelineExecutor, LoadErrorFailsTheStepAfterTheTable) {
  Communicator& world = World();
  const int stages = world.size(), rank = world.rank();
  auto partition = PartitionStages(kLayers, stages, 1);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LanguageModel stage(testing::TinyGqaConfig(false, kLayers), kSeed,
                      ModelParallelism{.chunks = partition->Chunks(rank)});
  auto actions = BuildSchedule(
      {.kind = ScheduleKind::kOneFOneB, .stages = stages, .micro_batches = kMicroBatches}, rank);
  ASSERT_TRUE(actions.ok()) << actions.status();
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);
  int loads = 0;
  const absl::StatusOr<double> loss = executor.Step(
      [&](int mb, int32_t* inputs, int32_t* targets) {
        ++loads;
        if (rank == 0 && mb == 2) return absl::DataLossError("token 99 outside the vocabulary");
        return LoadTokens(mb, inputs, targets);
      },
      1.0f);
  if (rank == 0) {
    EXPECT_EQ(loss.status(), absl::DataLossError("token 99 outside the vocabulary"));
  } else {
    EXPECT_TRUE(loss.ok()) << loss.status();
  }
  // The first and last stage load every micro-batch; the middle ones none.
  EXPECT_EQ(loads, rank == 0 || rank == stages - 1 ? kMicroBatches : 0) << "rank " << rank;
}

// Pipeline messages travel in pooled buffers: every step ends with all of
// them back in the pool, so however the sends' completion interleaves with
// the computations (machine load decides that), three steps together make at
// most one step's messages' worth, where one buffer per message would make
// three times as many.
TEST(PipelineExecutor, MessageBuffersAreReused) {
  Communicator& world = World();
  const ModelConfig config = testing::TinyGqaConfig(false, kLayers);
  auto partition = PartitionStages(kLayers, world.size(), 1);
  ASSERT_TRUE(partition.ok()) << partition.status();
  LanguageModel stage(config, kSeed, ModelParallelism{.chunks = partition->Chunks(world.rank())});
  const ScheduleSpec spec{
      .kind = ScheduleKind::kOneFOneB, .stages = world.size(), .micro_batches = kMicroBatches};
  auto actions = BuildSchedule(spec, world.rank());
  ASSERT_TRUE(actions.ok()) << actions.status();
  const int64_t messages = std::count_if(actions->begin(), actions->end(),
                                         [](const Action& a) { return !IsCompute(a.type); });
  PipelineExecutor executor(stage, world, *actions, kBatch, kSeq);
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(executor.Step(LoadTokens, 1.0f).ok());
  EXPECT_GT(executor.message_buffers(), 0);
  EXPECT_LE(executor.message_buffers(), messages);
}

}  // namespace
}  // namespace tetra
