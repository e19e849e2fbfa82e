// Checkpoints end to end through the `tetra` binary: a run stopped and
// resumed continues bit for bit as the uninterrupted run (after a save, after
// SIGTERM, after kill -9 mid-save), `tetra checkpoint inspect` and `export`
// work, and every kind of damage (flipped byte, truncated shard, missing
// marker, swapped manifest records, broken directories, an impossible step)
// ends in a message naming the file and the tensor or in a fallback to the
// previous complete checkpoint, never in a wrong load; another run's
// checkpoint and a checkpoint.dir another job holds are refused at start, and
// so is any output location that cannot be written.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_lock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::tetra::testing::ReadBytes;
namespace fs = std::filesystem;

// How long a test waits for a background run to reach a point (a few
// steps, a first checkpoint): far above what a loaded machine needs (well
// under a second when idle), so only a broken run ever reaches it.
constexpr auto kBackgroundLimit = std::chrono::seconds(300);

// Polls `reached` until it holds or kBackgroundLimit passes; returns it.
bool WaitUntil(const std::function<bool()>& reached) {
  const auto deadline = std::chrono::steady_clock::now() + kBackgroundLimit;
  while (!reached() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return reached();
}

struct RunResult {
  int exit_code;
  std::string out, err;
};

class CheckpointCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::ScratchDir("checkpoint_cli_test")) /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ckpt_ = (dir_ / "ckpt").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult Run(const std::string& args) {
    const std::string command = std::string(TETRA_BINARY) + " " + args + " >" +
                                (dir_ / "out").string() + " 2>" + (dir_ / "err").string();
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadBytes(dir_ / "out"),
            ReadBytes(dir_ / "err")};
  }

  // `tetra train` of a tiny model for `steps` steps (the LR schedule spans
  // them), metrics to `metrics`, checkpoints in ckpt_ when `interval` >= 0.
  std::string TrainArgs(int steps, const std::string& metrics, int interval,
                        const std::string& extra = "") {
    std::string args =
        "train --config /dev/null --set model.vocab_size=32 --set model.hidden_size=16"
        " --set model.num_hidden_layers=2 --set model.num_attention_heads=2"
        " --set model.intermediate_size=32 --set train.global_batch_size=4"
        " --set train.micro_batch_size=2 --set train.seq_length=8 --set train.threads=1"
        " --set optimizer.lr=3e-3 --set optimizer.warmup_steps=2 --set train.steps=" +
        std::to_string(steps) + " --set log.metrics_path=" + (dir_ / metrics).string();
    if (interval >= 0) {
      args += " --set checkpoint.dir=" + ckpt_ +
              " --set checkpoint.interval=" + std::to_string(interval);
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

  // Whether ckpt_ holds a step_NNNNNNNN directory (written as .tmp, renamed
  // when complete), while a run may be saving and deleting them.
  bool HasCompleteCheckpoint() {
    std::error_code error;
    for (fs::directory_iterator it(ckpt_, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (name.starts_with("step_") && !name.ends_with(".tmp")) return true;
    }
    return false;
  }

  std::string StepDir(int step) {
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08d", step);
    return (fs::path(ckpt_) / name).string();
  }

  // Rewrites the manifest of the step directory `dir` through `edit`, and its
  // COMPLETE marker to match (as a tool that edits checkpoints would).
  template <typename Edit>
  void EditManifest(const std::string& dir, Edit edit) {
    CheckpointManifest manifest;
    ASSERT_TRUE(manifest.ParseFromString(ReadBytes(dir + "/manifest.pb")));
    edit(manifest);
    const std::string bytes = manifest.SerializeAsString();
    tetra::testing::WriteBytes(dir + "/manifest.pb", bytes);
    tetra::testing::WriteBytes(dir + "/COMPLETE",
                               CompleteMarkerText(manifest.state().step(), bytes));
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
  for (const fs::directory_entry& e : fs::directory_iterator(ckpt_))
    names.push_back(e.path().filename());
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
  const bool running = WaitUntil([&] { return lines() >= 3; });
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = ReadBytes(dir_ / "out");
  ASSERT_TRUE(running) << "no 3 steps written in " << kBackgroundLimit.count() << " s\n" << out;
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
  RunResult run =
      Run(TrainArgs(4, "a.jsonl", 0, " --set export_path=" + (dir_ / "exported").string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  RunResult inspect = Run("checkpoint inspect " + ckpt_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("step 4, 16 samples consumed"));
  EXPECT_THAT(inspect.out, HasSubstr("exp_avg_sq model.layers.1.mlp.down_proj.weight"));
  EXPECT_THAT(inspect.out, HasSubstr("all 63 shard checksums verified"));  // 21 tensors x 3 kinds
  // The same model directory as the run's export_path: weights, config.json
  // and nothing else (no token ids known, so no generation_config.json).
  const fs::path exported_dir = dir_ / "from_checkpoint";
  RunResult exp = Run("checkpoint export " + StepDir(4) + " --out " + exported_dir.string());
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_EQ(ReadBytes(exported_dir / "config.json"), ReadBytes(dir_ / "exported" / "config.json"));
  EXPECT_EQ(fs::exists(exported_dir / "generation_config.json"),
            fs::exists(dir_ / "exported" / "generation_config.json"));
  const std::string exported = (exported_dir / "model.safetensors").string();
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
    EXPECT_THAT(r.err, HasSubstr("checkpoint file " + file +
                                 " is corrupt: \"model.embed_tokens.weight\" (weight)"));
    EXPECT_THAT(r.err, HasSubstr("\nhint: "));
  }
}

// A step directory renamed (or a manifest of another step copied in): inspect
// refuses it as resume does, whether named itself or found as the newest.
TEST_F(CheckpointCliTest, AStepDirectoryWhoseNameDisagreesWithItsManifestIsRefused) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  fs::rename(StepDir(2), StepDir(3));
  for (const std::string& args :
       {"checkpoint inspect " + ckpt_, "checkpoint inspect " + StepDir(3) + "/",
        TrainArgs(4, "b.jsonl", 0)}) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("is named for step 3 but its manifest says step 2")) << args;
    EXPECT_THAT(r.err, HasSubstr("\nhint: ")) << args;
  }
}

TEST_F(CheckpointCliTest, TruncatedShardIsAnErrorNamingFileAndTensor) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  const std::string file = StepDir(2) + "/rank_00000.bin";
  fs::resize_file(file, fs::file_size(file) - 4);
  RunResult r = Run(TrainArgs(4, "b.jsonl", 0));
  EXPECT_EQ(r.exit_code, 1);
  // The last shard written is the last tensor's second moment.
  EXPECT_THAT(r.err, HasSubstr("checkpoint file " + file +
                               " is truncated: \"lm_head.weight\" (exp_avg_sq)"));
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

// The manifest stores the config of the run that wrote it: a run with another
// model, seed or data is refused, naming the field and both values; what may
// change on resume (train.steps, the LR schedule, paths, the micro-batch) does.
TEST_F(CheckpointCliTest, AnotherRunsCheckpointIsRefusedNamingTheField) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  const std::map<std::string, std::string> refused = {
      {" --set model.intermediate_size=64", "model.intermediate_size 32, but this run has 64"},
      {" --set model.num_hidden_layers=1", "model.num_hidden_layers 2, but this run has 1"},
      {" --set train.seed=7", "train.seed 1234, but this run has 7"},
      {" --set data.synthetic.order=3", "data.synthetic.order 2, but this run has 3"},
      {" --set data.shuffle=true", "data.shuffle false, but this run has true"},
  };
  for (const auto& [change, message] : refused) {
    RunResult r = Run(TrainArgs(4, "b.jsonl", 0, change));
    EXPECT_EQ(r.exit_code, 1) << change;
    EXPECT_THAT(r.err, HasSubstr("checkpoint " + StepDir(2) + " was written by a run with " +
                                 message + ": it is another run's checkpoint\nhint: "))
        << change;
    EXPECT_THAT(r.err, HasSubstr("checkpoint.resume: false")) << change;
  }
  // Another batch size would put the data position elsewhere.
  RunResult batch = Run(TrainArgs(4, "b.jsonl", 0, " --set train.global_batch_size=8"));
  EXPECT_EQ(batch.exit_code, 1);
  EXPECT_THAT(batch.err,
              HasSubstr("is at step 2 after 8 samples, but train.global_batch_size 8 would have "
                        "consumed 16"));
  RunResult legal = Run(TrainArgs(4, "c.jsonl", 0,
                                  " --set optimizer.lr=1e-3 --set optimizer.min_lr=1e-4 --set "
                                  "train.micro_batch_size=1 --set data.valid_path=" +
                                      ckpt_ + "/none"));
  EXPECT_THAT(legal.err, Not(HasSubstr("another run's checkpoint")));
  RunResult resumed =
      Run(TrainArgs(4, "c.jsonl", 0, " --set optimizer.lr=1e-3 --set train.micro_batch_size=1"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + StepDir(2) + " (step 2)"));
}

// A checkpoint at a step the run cannot continue from is refused: beyond
// train.steps, or beyond the int range steps count in (a manifest saying
// step 2^62, whose resume arithmetic would overflow).
TEST_F(CheckpointCliTest, StepBeyondTheRunIsAnError) {
  ASSERT_EQ(Run(TrainArgs(4, "a.jsonl", 0)).exit_code, 0);
  RunResult shorter = Run(TrainArgs(2, "b.jsonl", 0));
  EXPECT_EQ(shorter.exit_code, 1);
  EXPECT_THAT(shorter.err,
              HasSubstr("checkpoint " + StepDir(4) + " is at step 4, beyond train.steps 2"));
  EXPECT_THAT(shorter.err, HasSubstr("\nhint: set train.steps above 4"));
  const int64_t huge = int64_t{1} << 62;
  const std::string huge_dir = ckpt_ + "/step_" + std::to_string(huge);
  fs::rename(StepDir(4), huge_dir);
  EditManifest(huge_dir, [&](CheckpointManifest& m) {
    m.mutable_state()->set_step(huge);
    m.mutable_state()->set_consumed_samples(
        std::numeric_limits<int64_t>::max());  // 2^62 x 4 samples overflow
  });
  RunResult r = Run(TrainArgs(4, "c.jsonl", 0));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("checkpoint " + huge_dir +
                               " is at step 4611686018427387904, beyond the "
                               "2147483647 steps a run counts to"));
}

// Hostile checkpoint directories end in one clear error naming the path,
// never a crash: a step directory that is a symlink loop, a checkpoint.dir
// that is one, a manifest that is a directory.
TEST_F(CheckpointCliTest, BrokenCheckpointDirectoriesAreErrorsNamingThePath) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  fs::create_directory_symlink("step_00000009", StepDir(9));
  for (const std::string& args : {"checkpoint inspect " + ckpt_, TrainArgs(4, "b.jsonl", 0)}) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("checkpoint " + StepDir(9) +
                                 " is not a readable directory: Too many levels "
                                 "of symbolic links\nhint: "))
        << args;
  }
  fs::remove(StepDir(9));
  fs::remove(StepDir(2) + "/manifest.pb");
  fs::create_directory(StepDir(2) + "/manifest.pb");
  for (const std::string& args : {"checkpoint inspect " + ckpt_, TrainArgs(4, "b.jsonl", 0)}) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("checkpoint manifest " + StepDir(2) +
                                 "/manifest.pb is a directory, not a "
                                 "regular file\nhint: "))
        << args;
  }
  const std::string loop = (dir_ / "loop").string();
  fs::create_directory_symlink("loop", loop);
  RunResult r = Run(TrainArgs(4, "b.jsonl", -1, " --set checkpoint.dir=" + loop));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot create checkpoint.dir " + loop +
                               ": Too many levels of symbolic links"));
  EXPECT_THAT(Run("checkpoint inspect " + loop).err, HasSubstr("tetra: error: "));
}

// Two same-shape tensors swapped in the manifest: the data bytes are
// untouched, so only checksums that cover the records can tell. With the
// manifest's checksum in COMPLETE left as it was, the manifest itself fails.
TEST_F(CheckpointCliTest, SwappedManifestRecordsAreCorruption) {
  ASSERT_EQ(Run(TrainArgs(2, "a.jsonl", 0)).exit_code, 0);
  const std::string marker = ReadBytes(StepDir(2) + "/COMPLETE");
  const std::string q = "model.layers.0.self_attn.q_proj.weight",
                    o = "model.layers.0.self_attn.o_proj.weight";
  EditManifest(StepDir(2), [&](CheckpointManifest& m) {
    for (TensorRecord& t : *m.mutable_tensors()) {
      if (t.kind() == TensorRecord::WEIGHT && (t.name() == q || t.name() == o))
        t.set_name(t.name() == q ? o : q);
    }
  });
  for (const std::string& args : {"checkpoint inspect " + ckpt_, TrainArgs(4, "b.jsonl", 0)}) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("is corrupt: \"model.layers.0.self_attn.")) << args;
    EXPECT_THAT(r.err, HasSubstr("(its data, or the record naming it, was altered)\nhint: "))
        << args;
  }
  tetra::testing::WriteBytes(StepDir(2) + "/COMPLETE", marker);
  RunResult r = Run(TrainArgs(4, "b.jsonl", 0));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("checkpoint manifest " + StepDir(2) +
                               "/manifest.pb is corrupt: its bytes have "
                               "CRC-32C"));
}

// A second job on a checkpoint.dir is refused at start, naming the holder: a
// helper process holds the lock (no race of two trainings). A lock file left
// by a process that died is taken over, saying so; a clean exit removes it.
TEST_F(CheckpointCliTest, SecondJobOnOneCheckpointDirIsRefused) {
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    close(ready[0]);
    close(release[1]);
    std::ostringstream notes;
    absl::StatusOr<CheckpointLock> lock = CheckpointLock::Acquire(ckpt_, notes);
    const char ok = lock.ok() ? '1' : '0';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    char ignored;
    while (read(release[0], &ignored, 1) > 0) {
    }  // until the parent closes it
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  char ok = '0';
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  RunResult second = Run(TrainArgs(4, "a.jsonl", 2));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_THAT(second.err, HasSubstr("tetra: error: checkpoint.dir " + ckpt_ +
                                    " is in use by another tetra job "
                                    "(pid \"" +
                                    std::to_string(holder) + "\" on host \""));
  EXPECT_THAT(second.err,
              HasSubstr("\nhint: wait for that job to end or stop it, or point checkpoint.dir at "
                        "another directory"));
  EXPECT_FALSE(fs::exists(dir_ / "a.jsonl"));  // refused before anything ran
  close(release[1]);
  int status = 0;
  waitpid(holder, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  // A killed job's lock file: its text stays, its flock went with it.
  tetra::testing::WriteBytes(ckpt_ + "/tetra.lock",
                             "host gone-node\npid 999999\nstarted 2026-01-01 00:00:00 UTC\n");
  RunResult after = Run(TrainArgs(4, "a.jsonl", 2));
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(
      after.out,
      HasSubstr("tetra: taking over the lock " + ckpt_ +
                "/tetra.lock of pid \"999999\" on "
                "host \"gone-node\", started \"2026-01-01 00:00:00 UTC\", which ended without "
                "releasing it"));
  EXPECT_FALSE(fs::exists(ckpt_ + "/tetra.lock"));
}

// Every output location is checked before the first step, so an unwritable
// one fails at once (naming the field and the path) instead of after the
// run. Under a regular file nothing can be created, even by root.
TEST_F(CheckpointCliTest, UnwritableOutputsFailBeforeTheFirstStep) {
  const std::string file = (dir_ / "file").string();
  tetra::testing::WriteBytes(file, "not a directory");
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"export_path", file + "/sub"},         {"log.metrics_path", file + "/sub/metrics.jsonl"},
      {"log.tensorboard_dir", file + "/sub"}, {"log.trace_path", file + "/sub/trace.json"},
      {"checkpoint.dir", file + "/sub"},
  };
  for (const auto& [field, path] : outputs) {
    RunResult r = Run(TrainArgs(3, "a.jsonl", -1, " --set " + field + "=" + path));
    EXPECT_EQ(r.exit_code, 1) << field;
    EXPECT_THAT(r.err, HasSubstr("tetra: error: ")) << field;
    EXPECT_THAT(r.err, HasSubstr(path)) << field;
    EXPECT_THAT(r.err, HasSubstr("\nhint: point " + field)) << field;
    EXPECT_THAT(r.out, Not(HasSubstr("step 1/"))) << field << ": " << r.out;
  }
  RunResult proc = Run(TrainArgs(3, "a.jsonl", -1, " --set export_path=/proc/tetra_export"));
  EXPECT_EQ(proc.exit_code, 1);
  EXPECT_THAT(proc.err, HasSubstr("export_path /proc/tetra_export cannot be written"));
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
    // Wait for a complete checkpoint (not step 1's: keep=2 deletes it two
    // steps later, which a busy machine's polling may miss), then a little
    // longer (any moment will do: the delays only vary what the run is doing
    // when killed).
    const bool saved = WaitUntil([&] { return HasCompleteCheckpoint(); });
    if (saved) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ASSERT_TRUE(saved) << "no checkpoint in " << kBackgroundLimit.count()
                       << " s: " << ReadBytes(dir_ / "out");
    RunResult inspect = Run("checkpoint inspect " + ckpt_);
    ASSERT_EQ(inspect.exit_code, 0) << "killed after " << delay_ms << " ms: " << inspect.err;
    const int step = std::stoi(inspect.out.substr(inspect.out.find("  step ") + 7));
    RunResult resumed =
        Run(TrainArgs(100000, "b.jsonl", 0, " --set train.steps=" + std::to_string(step + 1)));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_THAT(resumed.out, HasSubstr("(step " + std::to_string(step) + ")"));
  }
}

}  // namespace
}  // namespace tetra
