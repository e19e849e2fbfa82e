#include "observe/metrics_log.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

StepMetrics Example() {
  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 3e-4;
  m.grad_norm = 1.25;
  m.tokens_per_s = 1000;
  m.tflops = 0.5;
  m.step_time_s = 0.25;
  m.loss_floor = 1.5;
  return m;
}

TEST(MetricsLogTest, JsonHasContractFieldsInOrder) {
  EXPECT_EQ(MetricsJson(Example()),
            "{\"step\": 3, \"loss\": 2.5, \"lr\": 3e-04, \"grad_norm\": 1.25, "
            "\"tokens_per_s\": 1000, \"tflops\": 0.5, \"loss_floor\": 1.5, \"step_time_s\": 0.25}");
  StepMetrics with_mfu = Example();
  with_mfu.mfu = 0.125;
  with_mfu.val_loss = 2.75;
  EXPECT_THAT(
      MetricsJson(with_mfu),
      HasSubstr("\"tflops\": 0.5, \"mfu\": 0.125, \"loss_floor\": 1.5, \"val_loss\": 2.75"));
}

TEST(MetricsLogTest, SlowestRankIsAWholeNumberAfterTheContractFields) {
  StepMetrics m = Example();
  m.mtp_loss = 0.5;
  m.slowest_rank = 3;
  m.straggler_ratio = 1.75;
  EXPECT_THAT(MetricsJson(m),
              HasSubstr("\"mtp_loss\": 0.5, \"slowest_rank\": 3, \"straggler_ratio\": 1.75}"));
}

TEST(MetricsLogTest, BreakdownAndRunLayoutFollowTheStepTime) {
  StepMetrics m = Example();
  m.fwd_s = 0.125;
  m.bwd_s = 0.0625;
  m.comm_exposed_s = 0.03125;
  m.comm_exposed_s_tp = 0.03125;
  m.peak_memory_bytes = 1024;
  m.run = RunLayout{MeshShape::Of(2, 2, 2), 16, 2, 128, 1};
  EXPECT_THAT(
      MetricsJson(m),
      HasSubstr(
          "\"loss_floor\": 1.5, \"peak_memory_bytes\": 1024, \"step_time_s\": 0.25, "
          "\"fwd_s\": 0.125, \"bwd_s\": 0.0625, \"comm_exposed_s\": 0.03125, "
          "\"comm_exposed_s_tp\": 0.03125, \"world_size\": 8, \"tensor\": 2, "
          "\"context\": 1, \"pipeline\": 2, \"data\": 2, \"expert\": 1, \"global_batch_size\": 16, "
          "\"micro_batch_size\": 2, \"seq_length\": 128, \"zero_stage\": 1, "
          "\"virtual_stages\": 1, \"schedule\": \"ONE_F_ONE_B\"}"));
  // The schedule by its config name, so a report can tell ZB-H1 from 1F1B.
  m.run->schedule = ParallelConfig::DUALPIPE_V;
  m.run->virtual_stages = 2;
  EXPECT_THAT(MetricsJson(m),
              HasSubstr("\"zero_stage\": 1, \"virtual_stages\": 2, \"schedule\": \"DUALPIPE_V\"}"));
}

TEST(MetricsLogTest, RunLayoutOfReadsTheConfig) {
  TrainerConfig config;
  config.mutable_train()->set_global_batch_size(32);
  config.mutable_train()->set_micro_batch_size(4);
  config.mutable_train()->set_seq_length(256);
  config.mutable_optimizer()->set_zero_stage(1);
  config.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
  config.mutable_parallel()->set_virtual_stages(3);
  const MeshShape mesh = MeshShape::Of(/*tp=*/1, /*pp=*/2, /*dp=*/2);
  const RunLayout layout = RunLayout::Of(mesh, config);
  EXPECT_EQ(layout.mesh, mesh);
  EXPECT_EQ(layout.global_batch_size, 32);
  EXPECT_EQ(layout.micro_batch_size, 4);
  EXPECT_EQ(layout.seq_length, 256);
  EXPECT_EQ(layout.zero_stage, 1);
  EXPECT_EQ(layout.schedule, ParallelConfig::ZB_H1);
  EXPECT_EQ(layout.virtual_stages, 3);
  EXPECT_EQ(layout.micro_batches(), 4);  // 32 / (4 x 2)
}

TEST(MetricsLogTest, MixtureOfExpertsFields) {
  StepMetrics m = Example();
  m.aux_loss = 0.25;
  m.moe_load_imbalance = 1.5;
  m.dropped_tokens = 3;
  m.all_to_all_bytes = 4096;
  m.comm_exposed_s_ep = 0.125;
  EXPECT_THAT(MetricsJson(m), HasSubstr("\"step_time_s\": 0.25, \"comm_exposed_s_ep\": 0.125, "
                                        "\"aux_loss\": 0.25, \"moe_load_imbalance\": 1.5, "
                                        "\"dropped_tokens\": 3, \"all_to_all_bytes\": 4096}"));
}

TEST(MetricsLogTest, CheckpointStallOnlyOnStepsThatCheckpointed) {
  StepMetrics m = Example();
  EXPECT_THAT(MetricsJson(m), Not(HasSubstr("checkpoint_stall_s")));
  m.checkpoint_stall_s = 0.5;
  EXPECT_THAT(MetricsJson(m), HasSubstr(", \"checkpoint_stall_s\": 0.5}"));
}

TEST(MetricsLogTest, NumbersRoundTripExactlyAndNonFiniteIsNull) {
  StepMetrics m = Example();
  m.loss = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  EXPECT_THAT(MetricsJson(m), HasSubstr("\"loss\": 0.30000000000000004,"));
  m.loss = std::nan("");
  EXPECT_THAT(MetricsJson(m), HasSubstr("\"loss\": null,"));
}

TEST(MetricsLogTest, ProgressLineShowsWhatAUserWatches) {
  const std::string line = ProgressLine(Example(), 10, 83);
  EXPECT_EQ(line,
            "step 3/10 | loss 2.5000 (floor 1.5000) | lr 3.00e-04 | grad norm 1.250 | 1000 tok/s | "
            "500.00 GFLOP/s | ETA 1m23s");
}

TEST(MetricsLogTest, FileStartsAfreshAndGetsOneLinePerStep) {
  const std::string path = testing::ScratchDir("metrics_log_test") + "/run/metrics.jsonl";
  for (int run = 0; run < 2; ++run) {
    auto log = MetricsLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    StepMetrics m = Example();
    ASSERT_TRUE(log->Append(m).ok());
    m.step = 4;
    ASSERT_TRUE(log->Append(m).ok());
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(
      text.str(), MetricsJson(Example()) + "\n" + [] {
        StepMetrics m = Example();
        m.step = 4;
        return MetricsJson(m);
      }() + "\n");
}

// A run resumed after step 2 keeps steps 1 and 2 and redoes 3 onwards.
TEST(MetricsLogTest, ResumedRunKeepsTheStepsBeforeItsCheckpoint) {
  const std::string path = testing::ScratchDir("metrics_log_test") + "/resumed/metrics.jsonl";
  auto line = [](int step, double loss) {
    StepMetrics m = Example();
    m.step = step;
    m.loss = loss;
    return m;
  };
  {
    auto first = MetricsLog::Open(path);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int step = 1; step <= 4; ++step) ASSERT_TRUE(first->Append(line(step, 1.0)).ok());
  }
  auto resumed = MetricsLog::Open(path, /*resumed_step=*/2);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_TRUE(resumed->Append(line(3, 2.0)).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), MetricsJson(line(1, 1.0)) + "\n" + MetricsJson(line(2, 1.0)) + "\n" +
                            MetricsJson(line(3, 2.0)) + "\n");
}

TEST(MetricsLogTest, UnwritablePathIsAUserError) {
  auto log = MetricsLog::Open("/proc/no/such/dir/metrics.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("/proc/no/such/dir/metrics.jsonl"));
  EXPECT_THAT(log.status().message(), HasSubstr("\nhint: "));
}

}  // namespace
}  // namespace tetra
