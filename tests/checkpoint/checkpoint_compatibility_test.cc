// Which checkpoints a run may resume: its own (same seed, model and data) at
// a step it can continue from, whatever the layout, steps, LR schedule or
// paths now are; anything else is refused naming the field and both values.
#include "checkpoint/checkpoint_compatibility.h"

#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

constexpr char kPath[] = "ckpt/step_00000010";

// The manifest a run of `config` writes at step 10.
CheckpointManifest SavedAt10(const TrainerConfig& config) {
  CheckpointManifest manifest;
  *manifest.mutable_config() = config;
  manifest.mutable_state()->set_step(10);
  manifest.mutable_state()->set_consumed_samples(10 * config.train().global_batch_size());
  manifest.mutable_state()->set_global_batch_size(config.train().global_batch_size());
  return manifest;
}

// The config of the run that saved (and, unchanged, of the one resuming).
TrainerConfig Saver() {
  TrainerConfig config;
  config.mutable_train()->set_steps(20);
  config.mutable_data()->set_path("/data/a_*.bin");
  config.mutable_data()->set_format(DataConfig::LLMC);
  return config;
}

TEST(CheckpointCompatibilityTest, WhatMayChangeOnResumeResumes) {
  const CheckpointManifest saved = SavedAt10(Saver());
  TrainerConfig resumed = Saver();
  resumed.mutable_parallel()->set_tensor(2);
  resumed.mutable_parallel()->set_pipeline(2);
  resumed.mutable_parallel()->set_data(2);
  resumed.mutable_parallel()->set_expert(2);
  resumed.mutable_optimizer()->set_zero_stage(1);
  resumed.mutable_train()->set_steps(100);
  resumed.mutable_train()->set_micro_batch_size(2);
  resumed.mutable_optimizer()->set_lr(1e-3);
  resumed.mutable_optimizer()->set_min_lr(1e-5);
  resumed.mutable_optimizer()->set_warmup_steps(5);
  resumed.mutable_log()->set_metrics_path("elsewhere.jsonl");
  resumed.mutable_checkpoint()->set_dir("copy");
  resumed.mutable_data()->set_valid_path("/data/valid.bin");
  resumed.set_export_path("out");
  resumed.mutable_model()->set_make_vocab_size_divisible_by(
      64);  // checkpoints hold the vocabulary unpadded
  EXPECT_TRUE(CheckResumable(resumed, saved, 10, kPath).ok());
  resumed.mutable_train()->set_steps(10);  // a resume that runs no step (exports what was saved)
  EXPECT_TRUE(CheckResumable(resumed, saved, 10, kPath).ok());
}

TEST(CheckpointCompatibilityTest, AnotherSeedModelOrDataIsRefusedNamingTheField) {
  const CheckpointManifest saved = SavedAt10(Saver());
  const std::vector<std::pair<std::function<void(TrainerConfig&)>, std::string>> changes = {
      {[](TrainerConfig& c) { c.mutable_train()->set_seed(7); },
       "train.seed 1234, but this run has 7"},
      {[](TrainerConfig& c) { c.mutable_model()->set_hidden_size(128); },
       "model.hidden_size 64, but this run has 128"},
      {[](TrainerConfig& c) { c.mutable_model()->set_rope_theta(500000); },
       "model.rope_theta 10000, but this run has 500000"},
      {[](TrainerConfig& c) { c.mutable_model()->set_tie_word_embeddings(true); },
       "model.tie_word_embeddings false, but this run has true"},
      {[](TrainerConfig& c) { c.mutable_model()->mutable_moe()->set_scoring_func("softmax"); },
       "model.moe.scoring_func \"sigmoid\", but this run has \"softmax\""},
      {[](TrainerConfig& c) { c.mutable_data()->set_format(DataConfig::MEGATRON); },
       "data.format LLMC, but this run has MEGATRON"},
      {[](TrainerConfig& c) { c.mutable_data()->set_path("/data/b_*.bin"); },
       "data.path \"/data/a_*.bin\", but this run has \"/data/b_*.bin\""},
      {[](TrainerConfig& c) { c.mutable_data()->mutable_synthetic()->set_num_tokens(99); },
       "data.synthetic.num_tokens 4194304, but this run has 99"},
  };
  for (const auto& [change, message] : changes) {
    TrainerConfig other = Saver();
    change(other);
    const absl::Status status = CheckResumable(other, saved, 10, kPath);
    EXPECT_THAT(Message(status),
                HasSubstr(std::string("checkpoint ") + kPath + " was written by a run with " +
                          message + ": it is another run's checkpoint"));
    EXPECT_THAT(Message(status), HasSubstr("checkpoint.resume: false"));
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  // A string from the manifest is quoted in bounded size.
  CheckpointManifest long_path = saved;
  long_path.mutable_config()->mutable_data()->set_path(std::string(100000, 'p'));
  const absl::Status status = CheckResumable(Saver(), long_path, 10, kPath);
  EXPECT_THAT(Message(status), HasSubstr("... (100000 bytes), but this run has \"/data/a_*.bin\""));
  EXPECT_LT(Message(status).size(), 1000u);
}

TEST(CheckpointCompatibilityTest, StepsTheRunCannotContinueFromAreRefused) {
  const TrainerConfig run = Saver();
  EXPECT_THAT(
      Message(CheckResumeStep(run, 21, kPath)),
      HasSubstr(std::string("checkpoint ") + kPath + " is at step 21, beyond train.steps 20"));
  const int64_t huge = int64_t{1} << 62;
  const absl::Status beyond = CheckResumeStep(run, huge, kPath);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(beyond),
              HasSubstr("is at step 4611686018427387904, beyond the 2147483647 steps"));
  EXPECT_THAT(Message(beyond), UserErrorShape());
  // The manifest at 2^62, whose samples (2^62 x 8) would overflow int64.
  CheckpointManifest saved = SavedAt10(run);
  saved.mutable_state()->set_step(huge);
  saved.mutable_state()->set_consumed_samples(std::numeric_limits<int64_t>::max());
  EXPECT_THAT(Message(CheckResumable(run, saved, huge, kPath)),
              HasSubstr("beyond the 2147483647 steps"));
  EXPECT_THAT(Message(CheckResumable(run, saved, 10, kPath)),
              HasSubstr("is named for step 10 but its manifest says step 4611686018427387904"));
  saved = SavedAt10(run);
  saved.mutable_state()->set_consumed_samples(81);
  EXPECT_THAT(
      Message(CheckResumable(run, saved, 10, kPath)),
      HasSubstr(
          "is at step 10 after 81 samples, but train.global_batch_size 8 would have consumed 80"));
}

}  // namespace
}  // namespace tetra
