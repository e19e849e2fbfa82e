// Checkpoints end to end through the `tetra` binary: a run stopped and
// resumed continues bit for bit as the uninterrupted run (after a save, after
// SIGTERM, after kill -9 mid-save), `tetra checkpoint inspect` and `export`
// work, and every kind of damage (flipped byte, truncated shard, missing
// marker, another model) ends in a message naming the file and the tensor or
// in a fallback to the previous complete checkpoint, never in a wrong load.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::ReadBytes;
namespace fs = std::filesystem;

struct RunResult {
  int exit_code;
  std::string out, err;
};

class CheckpointCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("checkpoint_cli_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ckpt_ = (dir_ / "ckpt").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult Run(const std::string& args) {
    const std::string command = std::string(TETRA_BINARY) + " " + args + " >" + (dir_ / "out").string() +
                                " 2>" + (dir_ / "err").string();
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadBytes(dir_ / "out"), ReadBytes(dir_ / "err")};
  }

  // `tetra train` of a tiny model for `steps` steps (the LR schedule spans
  // them), metrics to `metrics`, checkpoints in ckpt_ when `interval` >= 0.
  std::string TrainArgs(int steps, const std::string& metrics, int interval, const std::string& extra = "") {
    std::string args = "train --config /dev/null --set model.vocab_size=32 --set model.hidden_size=16"
                       " --set model.num_hidden_layers=2 --set model.num_attention_heads=2"
                       " --set model.intermediate_size=32 --set train.global_batch_size=4"
                       " --set train.micro_batch_size=2 --set train.seq_length=8 --set train.threads=1"
                       " --set optimizer.lr=3e-3 --set optimizer.warmup_steps=2 --set train.steps=" +
                       std::to_string(steps) + " --set log.metrics_path=" + (dir_ / metrics).string();
    if (interval >= 0) {
      args += " --set checkpoint.dir=" + ckpt_ + " --set checkpoint.interval=" + std::to_string(interval);
    }
    return args + extra;
  }

  // The "loss" and "grad_norm" of every step, as written (shortest round-trip text), keyed by step.
  std::map<int, std::string> Curve(const std::string& metrics) {
    std::map<int, std::string> curve;
    std::istringstream in(ReadBytes(dir_ / metrics));
    for (std::string line; std::getline(in, line);) {
      const int step = std::stoi(line.substr(line.find("\"step\": ") + 8));
      std::string values;
      for (const std::string name : {"\"loss\": ", "\"grad_norm\": "}) {
        const size_t at = line.find(name);
        values += line.substr(at, line.find(',', at) - at) + " ";
      }
      curve[step] = values;
    }
    return curve;
  }

  // Expects the curve in `resumed` to equal steps first..last of `full`, bit for bit.
  void ExpectContinues(const std::string& full, const std::string& resumed, int first, int last) {
    std::map<int, std::string> a = Curve(full), b = Curve(resumed);
    ASSERT_EQ(b.size(), static_cast<size_t>(last - first + 1)) << ReadBytes(dir_ / resumed);
    for (int step = first; step <= last; ++step) EXPECT_EQ(a[step], b[step]) << "step " << step;
  }

  std::string StepDir(int step) {
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08d", step);
    return (fs::path(ckpt_) / name).string();
  }

  // The full uninterrupted 20-step run, the reference of every test.
  void RunFull() { ASSERT_EQ(Run(TrainArgs(20, "full.jsonl", -1)).exit_code, 0); }

  fs::path dir_;
  std::string ckpt_;
};

TEST_F(CheckpointCliTest, ResumeAfterSaveIsBitExact) {
  RunFull();
  // Save at 10 and 20 (the last step); drop 20 so the run resumes from 10.
  RunResult first = Run(TrainArgs(20, "a.jsonl", 10));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("checkpoint saved to " + StepDir(10)));
  fs::remove_all(StepDir(20));
  RunResult resumed = Run(TrainArgs(20, "b.jsonl", 10));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + StepDir(10) + " (step 10)"));
  ExpectContinues("full.jsonl", "b.jsonl", 11, 20);
  // checkpoint.resume false starts afresh.
  RunResult fresh = Run(TrainArgs(20, "c.jsonl", 10, " --set checkpoint.resume=false"));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  ExpectContinues("full.jsonl", "c.jsonl", 1, 20);
}

TEST_F(CheckpointCliTest, RetentionKeepsTheNewest) {
  ASSERT_EQ(Run(TrainArgs(7, "a.jsonl", 2, " --set checkpoint.keep=2")).exit_code, 0);
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(ckpt_)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_00000006", "step_00000007"}));
  RunResult negative = Run(TrainArgs(7, "a.jsonl", 2, " --set checkpoint.keep=-1"));
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_THAT(negative.err, HasSubstr("checkpoint.interval 2 and checkpoint.keep -1 must be >= 0"));
}

TEST_F(CheckpointCliTest, SigtermFinishesTheStepSavesAndExitsZero) {
  // A constant LR after warmup (min_lr == lr), so the schedule does not
  // depend on train.steps: a run of "forever" is stopped by SIGTERM once under
  // way, and resumed to 3 steps past the stop it equals a plain run to there.
  const std::string constant_lr = " --set optimizer.min_lr=3e-3";
  const std::string metrics = (dir_ / "a.jsonl").string();
  const std::string command = std::string(TETRA_BINARY) + " " +
                              TrainArgs(100000, "a.jsonl", 0, constant_lr) + " >" +
                              (dir_ / "out").string() + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
    _exit(127);
  }
  auto lines = [&] {
    const std::string text = ReadBytes(metrics);
    return std::count(text.begin(), text.end(), '\n');
  };
  for (int i = 0; i < 600 && lines() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = ReadBytes(dir_ / "out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  ASSERT_THAT(out, HasSubstr("stopped by SIGTERM after step "));
  const int stopped = std::stoi(out.substr(out.find("after step ") + 11));
  EXPECT_THAT(out, HasSubstr("checkpoint saved to " + StepDir(stopped)));
  EXPECT_EQ(Curve("a.jsonl").size(), static_cast<size_t>(stopped));

  const int last = stopped + 3;
  RunResult resumed = Run(TrainArgs(last, "b.jsonl", 0, constant_lr));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  fs::remove_all(ckpt_);
  ASSERT_EQ(Run(TrainArgs(last, "full.jsonl", -1, constant_lr)).exit_code, 0);
  ExpectContinues("full.jsonl", "b.jsonl", stopped + 1, last);
}

TEST_F(CheckpointCliTest, InspectVerifiesAndExportWritesTheWeights) {
  // The final checkpoint holds the weights the run exports at its end.
  RunResult run = Run(TrainArgs(4, "a.jsonl", 0, " --set export_path=" + (dir_ / "exported").string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  RunResult inspect = Run("checkpoint inspect " + ckpt_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("step 4, 16 samples consumed"));
  EXPECT_THAT(inspect.out, HasSubstr("exp_avg_sq model.layers.1.mlp.down_proj.weight"));
  EXPECT_THAT(inspect.out, HasSubstr("all 63 shard checksums verified"));  // 21 tensors x 3 kinds
  const std::string exported = (dir_ / "from_checkpoint.safetensors").string();
  RunResult exp = Run("checkpoint export " + StepDir(4) + " --out " + exported);
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  // Same tensors, same fp32 bytes, in the same order: the files are identical
  // but for the metadata, so compare the data after each header.
  auto data = [](const std::string& bytes) {
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    return bytes.substr(8 + header);
  };
  const std::string a = ReadBytes(exported), b = ReadBytes(dir_ / "exported" / "model.safetensors");
  ASSERT_GT(a.size(), 8u);
  ASSERT_GT(b.size(), 8u);
  EXPECT_EQ(data(a), data(b));
}

TEST_F(CheckpointCliTest, FlippedByteIsAnErrorNamingFileAndTensor) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  const std::string file = StepDir(2) + "/rank_00000.bin";
  std::string bytes = ReadBytes(file);
  bytes[100] ^= 0x10;  // inside the first tensor, the embedding (32 x 16 floats)
  tetra::testing::WriteBytes(file, bytes);
  for (const std::string& args : {"checkpoint inspect " + ckpt_, TrainArgs(4, "b.jsonl", 0)}) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("checkpoint file " + file + " is corrupt: \"model.embed_tokens.weight\" (weight)"));
    EXPECT_THAT(r.err, HasSubstr("\nhint: "));
  }
}

TEST_F(CheckpointCliTest, TruncatedShardIsAnErrorNamingFileAndTensor) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  const std::string file = StepDir(2) + "/rank_00000.bin";
  fs::resize_file(file, fs::file_size(file) - 4);
  RunResult r = Run(TrainArgs(4, "b.jsonl", 0));
  EXPECT_EQ(r.exit_code, 1);
  // The last shard written is the last tensor's second moment.
  EXPECT_THAT(r.err, HasSubstr("checkpoint file " + file + " is truncated: \"lm_head.weight\" (exp_avg_sq)"));
}

TEST_F(CheckpointCliTest, IncompleteNewestFallsBackToThePrevious) {
  RunFull();
  ASSERT_EQ(Run(TrainArgs(20, "a.jsonl", 10)).exit_code, 0);
  // Step 20 without its marker (as if the save died before it), and a stale
  // temporary directory of a crashed save: resume takes step 10, saying so.
  fs::remove(StepDir(20) + "/COMPLETE");
  fs::create_directories(StepDir(15) + ".tmp");
  RunResult r = Run(TrainArgs(20, "b.jsonl", 10));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + StepDir(20) + " is incomplete (no COMPLETE marker"));
  EXPECT_THAT(r.out, HasSubstr("resumed from " + StepDir(10)));
  ExpectContinues("full.jsonl", "b.jsonl", 11, 20);
}

TEST_F(CheckpointCliTest, AnotherModelShapeIsAnError) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  RunResult wider = Run(TrainArgs(4, "b.jsonl", 0, " --set model.intermediate_size=64"));
  EXPECT_EQ(wider.exit_code, 1);
  EXPECT_THAT(wider.err, HasSubstr("has model.layers.0.mlp.gate_proj.weight (weight) of shape [32, 16] but "
                                   "the model's is [64, 16]"));
  RunResult deeper = Run(TrainArgs(4, "b.jsonl", 0, " --set model.num_hidden_layers=1"));
  EXPECT_EQ(deeper.exit_code, 1);
  EXPECT_THAT(deeper.err, HasSubstr("holds 21 weight and buffer tensors but the model has 12"));
  // Another batch size would put the data position elsewhere.
  RunResult batch = Run(TrainArgs(4, "b.jsonl", 0, " --set train.global_batch_size=8"));
  EXPECT_EQ(batch.exit_code, 1);
  EXPECT_THAT(batch.err, HasSubstr("is at step 2 after 8 samples, but train.global_batch_size 8 would have "
                                   "consumed 16"));
}

TEST_F(CheckpointCliTest, KillDuringSaveLeavesAResumableCheckpoint) {
  // Saving after every step, killed -9 at several moments: whatever it was
  // doing, the newest complete checkpoint verifies and a resume from it runs.
  for (int delay_ms : {150, 300, 450}) {
    fs::remove_all(ckpt_);
    const std::string command = std::string(TETRA_BINARY) + " " +
                                TrainArgs(100000, "a.jsonl", 1, " --set checkpoint.keep=2") + " >" +
                                (dir_ / "out").string() + " 2>&1";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
      _exit(127);
    }
    // Wait for the first checkpoint, then a little longer.
    for (int i = 0; i < 600 && !fs::exists(StepDir(1)); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    RunResult inspect = Run("checkpoint inspect " + ckpt_);
    ASSERT_EQ(inspect.exit_code, 0) << "killed after " << delay_ms << " ms: " << inspect.err;
    const int step = std::stoi(inspect.out.substr(inspect.out.find("  step ") + 7));
    RunResult resumed = Run(TrainArgs(100000, "b.jsonl", 0, " --set train.steps=" + std::to_string(step + 1)));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_THAT(resumed.out, HasSubstr("(step " + std::to_string(step) + ")"));
  }
}

}  // namespace
}  // namespace tetra
