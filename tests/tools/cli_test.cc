// The `tetra` binary end to end: every bad input a user can cause ends with a
// non-zero exit and one sentence naming the problem plus a hint; the same
// config twice gives bit-identical loss curves; export and init_from agree; a
// Megatron blend draws its samples as BlendedDataset does.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/llmc_shard.h"
#include "data/megatron_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/address_limit.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::tetra::testing::ReadBytes;
namespace fs = std::filesystem;

struct RunResult {
  int exit_code;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::ScratchDir("cli_test")) /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult Run(const std::string& args) {
    const std::string command = prefix_ + std::string(TETRA_BINARY) + " " + args + " >" +
                                (dir_ / "out").string() + " 2>" + (dir_ / "err").string();
    int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadBytes(dir_ / "out"),
            ReadBytes(dir_ / "err")};
  }

  // A tiny, fast config file; `extra` is appended (later fields win for scalars).
  std::string WriteConfig(const std::string& extra, const std::string& name = "c.textproto") {
    const fs::path path = dir_ / name;
    std::ofstream(path)
        << "model { vocab_size: 32 hidden_size: 16 num_hidden_layers: 1 "
           "num_attention_heads: 2 intermediate_size: 32 }\n"
           "train { steps: 3 global_batch_size: 4 micro_batch_size: 2 seq_length: 8 threads: 1 }\n"
        << extra;
    return path.string();
  }

  // Expects failure with exit code 1 and stderr ending in exactly
  // "tetra: error: <what>\nhint: <hint>\n" (one line each, neither empty),
  // with each of `messages` in that error.
  void ExpectError(const std::string& args, const std::vector<std::string>& messages) {
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\nstderr: " << r.err;
    const size_t at = r.err.rfind("tetra: error: ");
    ASSERT_NE(at, std::string::npos) << args << "\nstderr: " << r.err;
    const std::string error = r.err.substr(at);
    EXPECT_THAT(error, MatchesRegex("tetra: error: [^\n]+\nhint: [^\n]+\n")) << args;
    for (const std::string& message : messages) EXPECT_THAT(error, HasSubstr(message)) << args;
  }
  void ExpectError(const std::string& args, const std::string& message) {
    ExpectError(args, std::vector<std::string>{message});
  }

  fs::path dir_;
  std::string prefix_;  // shell commands run before each tetra command
};

TEST_F(CliTest, ConfigParseErrorNamesLineAndColumn) {
  const std::string config = WriteConfig("optimizer {\n  lr: fast\n}\n");
  ExpectError("train --config " + config, config + ":4:");
}

TEST_F(CliTest, UnknownFieldGetsNearestName) {
  const std::string config = WriteConfig("optimizer { weight_decy: 0.1 }\n");
  ExpectError("train --config " + config, "did you mean \"weight_decay\"");
}

TEST_F(CliTest, BrokenConstraintNamesTheNumbers) {
  const std::string config = WriteConfig("");
  ExpectError(
      "train --config " + config + " --set model.hidden_size=100 --set model.num_attention_heads=3",
      "model.hidden_size 100 is not divisible by model.num_attention_heads 3");
}

TEST_F(CliTest, BadSetAndFlagsAndCommand) {
  const std::string config = WriteConfig("");
  ExpectError("train --config " + config + " --set train.steps=ten",
              std::vector<std::string>{"\"ten\" is not a 32-bit integer",
                                       "\nhint: write a 32-bit integer, e.g. --set train.steps="});
  ExpectError("train --config " + config + " --set data.format=CSV",
              "one of SYNTHETIC, LLMC, MEGATRON");
  ExpectError("train --config " + config + " --set model.hiden_size=8",
              "did you mean \"hidden_size\"");
  ExpectError("train --config " + config + " --sett train.steps=1", "unknown flag --sett");
  ExpectError("train --config " + config + " --set", "flag --set needs a value");
  ExpectError("train --config " + config + " stray", "unexpected argument \"stray\"");
  ExpectError("train --config " + (dir_ / "missing.textproto").string(), "cannot read config file");
  ExpectError("train", "needs --config");
  EXPECT_EQ(Run("trian --config x").exit_code, 2);
}

TEST_F(CliTest, MissingTruncatedAndWrongMagicShards) {
  const fs::path missing = dir_ / "missing.bin";
  ExpectError(
      "train --config " + WriteConfig("data { format: LLMC path: \"" + missing.string() + "\" }"),
      missing.string());

  const fs::path shard = dir_ / "train.bin";
  ASSERT_TRUE(WriteLlmcShard(shard.string(), std::vector<int32_t>(200, 3)).ok());
  fs::resize_file(shard, fs::file_size(shard) - 10);  // truncated
  const std::string config = WriteConfig("data { format: LLMC path: \"" + shard.string() + "\" }");
  ExpectError("train --config " + config,
              std::vector<std::string>{shard.string(), "promises 200 tokens", "truncated"});

  std::fstream(shard, std::ios::in | std::ios::out | std::ios::binary).write("\x01\x02\x03\x04", 4);
  ExpectError("train --config " + config,
              std::vector<std::string>{shard.string(), "20240520",
                                       "\nhint: data.format LLMC expects llm.c shards"});
}

TEST_F(CliTest, TokenOutsideVocabularyNamesFileAndPosition) {
  // Tokens are checked as samples load: 4 steps of 4 samples of 8 tokens read
  // tokens 0..128, so the run fails in step 4 (3 steps would never see it).
  std::vector<int32_t> tokens(200, 5);
  tokens[123] = 40;  // vocab_size is 32
  const fs::path shard = dir_ / "oov.bin";
  ASSERT_TRUE(WriteLlmcShard(shard.string(), tokens).ok());
  const std::string config = WriteConfig("data { format: LLMC path: \"" + shard.string() + "\" }");
  EXPECT_EQ(Run("train --config " + config).exit_code, 0);
  ExpectError("train --config " + config + " --set train.steps=4",
              std::vector<std::string>{shard.string() + ": token at position 123 is 40", "[0, 32)",
                                       "\nhint: check that model.vocab_size"});
}

TEST_F(CliTest, MegatronDatasetWithoutIndex) {
  const fs::path prefix = dir_ / "corpus";
  ASSERT_TRUE(WriteMegatronDataset(prefix.string(), {{1, 2, 3}, {4, 5, 6, 7}}, 8).ok());
  fs::remove(prefix.string() + ".idx");
  ExpectError("train --config " +
                  WriteConfig("data { format: MEGATRON path: \"" + prefix.string() + "\" }"),
              prefix.string() + ".idx");
}

TEST_F(CliTest, TrainsOnAMegatronBlend) {
  // data.path "0.3 A 0.7 B" with seq_length 8, global batch 4: the greedy
  // blending index gives samples 0..7 = B0 A0 B1 B2 | A1 B3 B4 A2 (largest
  // w max(i, 1) - count: i 0: 0.3 vs 0.7 -> B; i 1: 0.3 vs -0.3 -> A; i 2:
  // -0.4 vs 0.4 -> B; i 3: -0.1 vs 0.1 -> B; i 4: 0.2 vs -0.2 -> A; i 5, 6 ->
  // B; i 7: 0.1 vs -0.1 -> A). A's token 11 (vocab 32) lies only in A's
  // sample 1 (tokens 8..16), so step 1 runs and step 2 names it; alone, A
  // would reach it in step 1.
  std::vector<int32_t> a(40), b(60);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i % 32);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i * 7) % 32);
  a[11] = 40;
  const fs::path prefix_a = dir_ / "a", prefix_b = dir_ / "b";
  ASSERT_TRUE(WriteMegatronDataset(prefix_a.string(), {a}, 8).ok());
  ASSERT_TRUE(WriteMegatronDataset(prefix_b.string(), {b}, 8).ok());
  auto config = [&](const std::string& path, const std::string& metrics) {
    return WriteConfig("data { format: MEGATRON path: \"" + path + "\" }\nlog { metrics_path: \"" +
                       (dir_ / metrics).string() + "\" }\n");
  };
  const std::string blend = "0.3 " + prefix_a.string() + " 0.7 " + prefix_b.string();
  RunResult r = Run("train --config " + config(blend, "m1.jsonl") + " --set train.steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("blend of 0.3 " + prefix_a.string() + " (40 tokens), 0.7 " +
                                       prefix_b.string() + " (60 tokens)"));
  ExpectError("train --config " + config(blend, "m2.jsonl") + " --set train.steps=2",
              prefix_a.string() + ".bin: token at position 11 is 40");
  ExpectError("train --config " + config(prefix_a.string(), "m3.jsonl") + " --set train.steps=1",
              prefix_a.string() + ".bin: token at position 11 is 40");
  // Unnormalised weights are the same blend: the same losses, bit for bit.
  const std::string unnormalised = "3 " + prefix_a.string() + " 7 " + prefix_b.string();
  ASSERT_EQ(
      Run("train --config " + config(unnormalised, "m4.jsonl") + " --set train.steps=1").exit_code,
      0);
  const std::string first = ReadBytes(dir_ / "m1.jsonl"), second = ReadBytes(dir_ / "m4.jsonl");
  auto loss = [](const std::string& line) {
    const size_t at = line.find("\"loss\": ");
    return line.substr(at, line.find(',', at) - at);
  };
  ASSERT_THAT(first, HasSubstr("\"loss\": "));
  EXPECT_EQ(loss(first), loss(second));
  ExpectError("train --config " + config("0.3 " + prefix_a.string() + " 0.7", "m5.jsonl"),
              "data.path \"0.3 ");
}

TEST_F(CliTest, InitFromChecksNamesAndShapes) {
  // Export a model with another hidden size, then load it into this one.
  const std::string config = WriteConfig("");
  ASSERT_EQ(Run("export --config " + config + " --set model.hidden_size=32 --out " +
                (dir_ / "other").string())
                .exit_code,
            0);
  // Named inside its directory, the weights come with their config.json,
  // which disagrees with the recipe's model.
  const fs::path weights = dir_ / "other" / "model.safetensors";
  ExpectError("train --config " +
                  WriteConfig("init_from: \"" + weights.string() + "\"\n", "wide.textproto"),
              "model.hidden_size is 16 in the recipe but 32");
  // Alone, the file's tensors are checked against the recipe's model.
  const fs::path bare = dir_ / "bare_wide.safetensors";
  fs::copy_file(weights, bare);
  ExpectError("train --config " +
                  WriteConfig("init_from: \"" + bare.string() + "\"\n", "bare_wide.textproto"),
              "wrong shape");

  // A tied model lacks lm_head.weight.
  ASSERT_EQ(Run("export --config " + config + " --set model.tie_word_embeddings=true --out " +
                (dir_ / "tied").string())
                .exit_code,
            0);
  const fs::path bare_tied = dir_ / "bare_tied.safetensors";
  fs::copy_file(dir_ / "tied" / "model.safetensors", bare_tied);
  ExpectError("train --config " +
                  WriteConfig("init_from: \"" + bare_tied.string() + "\"\n", "tied.textproto"),
              "missing (lm_head.weight)");

  const fs::path garbage = dir_ / "garbage.safetensors";
  std::ofstream(garbage) << "not a safetensors file at all";
  ExpectError("train --config " +
                  WriteConfig("init_from: \"" + garbage.string() + "\"\n", "garbage.textproto"),
              garbage.string());
}

TEST_F(CliTest, ExportThenInitFromReproducesTheRun) {
  // Training from exported initial weights equals training from the seed.
  const std::string config = WriteConfig("");
  ASSERT_EQ(Run("export --config " + config + " --out " + (dir_ / "init").string()).exit_code, 0);
  EXPECT_THAT(ReadBytes(dir_ / "init" / "config.json"), HasSubstr("\"LlamaForCausalLM\""));
  const std::string seeded = Run("train --config " + config + " --set log.interval=1").out;
  const std::string loaded =
      Run("train --config " + config +
          " --set log.interval=1 --set init_from=" + (dir_ / "init" / "model.safetensors").string())
          .out;
  auto losses = [](const std::string& out) {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("step ", 0) == 0) lines.push_back(line.substr(0, line.find(" | lr")));
    }
    return lines;
  };
  EXPECT_EQ(losses(seeded).size(), 3u);
  EXPECT_EQ(losses(seeded), losses(loaded));
}

TEST_F(CliTest, SameConfigTwiceGivesBitIdenticalLosses) {
  // Two threads and sizes above the kernels' single-thread cut-off, so the
  // OpenMP and OpenBLAS paths are part of what must repeat exactly.
  const std::string config =
      WriteConfig("log { metrics_path: \"" + (dir_ / "a.jsonl").string() + "\" }\n");
  const std::string sizes =
      " --set train.steps=6 --set train.threads=2 --set model.hidden_size=128"
      " --set model.intermediate_size=384 --set model.vocab_size=512 --set train.seq_length=64"
      " --set model.num_hidden_layers=2";
  ASSERT_EQ(Run("train --config " + config + sizes).exit_code, 0);
  ASSERT_EQ(Run("train --config " + config + sizes +
                " --set log.metrics_path=" + (dir_ / "b.jsonl").string())
                .exit_code,
            0);
  // loss and grad_norm of every step, as written (shortest round-trip text).
  auto curves = [](const std::string& jsonl) {
    std::vector<std::string> values;
    std::istringstream in(jsonl);
    for (std::string line; std::getline(in, line);) {
      for (const std::string name : {"\"loss\": ", "\"grad_norm\": "}) {
        size_t at = line.find(name);
        values.push_back(line.substr(at, line.find(',', at) - at));
      }
    }
    return values;
  };
  std::vector<std::string> a = curves(ReadBytes(dir_ / "a.jsonl"));
  std::vector<std::string> b = curves(ReadBytes(dir_ / "b.jsonl"));
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
}

TEST_F(CliTest, ValidationLossUsesTheValidationSamples) {
  // With lr 0 the weights never move, so evaluating one global batch of a
  // validation file equal to the training file gives step 1's training loss.
  std::vector<int32_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + i / 5) % 32);
  const fs::path shard = dir_ / "tokens.bin";
  ASSERT_TRUE(WriteLlmcShard(shard.string(), tokens).ok());
  const fs::path metrics = dir_ / "m.jsonl";
  const std::string config = WriteConfig(
      "optimizer { lr: 0 min_lr: 0 }\n"
      "data { format: LLMC path: \"" +
      shard.string() + "\" valid_path: \"" + shard.string() +
      "\" }\n"
      "log { eval_interval: 2 eval_batches: 1 metrics_path: \"" +
      metrics.string() + "\" }\n");
  RunResult r = Run("train --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(ReadBytes(metrics));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  auto field = [](const std::string& line, const std::string& name) {
    size_t at = line.find("\"" + name + "\": ");
    if (at == std::string::npos) return std::string();
    at += name.size() + 4;
    return line.substr(at, line.find_first_of(",}", at) - at);
  };
  EXPECT_EQ(field(lines[0], "val_loss"), "");                       // step 1: no evaluation
  EXPECT_EQ(field(lines[1], "val_loss"), field(lines[0], "loss"));  // step 2: every 2 steps
  EXPECT_EQ(field(lines[2], "val_loss"), field(lines[0], "loss"));  // step 3: the last step
}

TEST_F(CliTest, LayoutIsCheckedAgainstTheLaunchedWorld) {
  // Under mpirun each rank sees the job's size; four ranks must not silently
  // run four independent single-rank trainings.
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  const std::string config = WriteConfig("");
  ExpectError("train --config " + config, "x data-parallel size 4");
  ExpectError("train --config " + config + " --set parallel.tensor=2 --set parallel.data=3",
              "tensor 2 x context 1 x pipeline 1 x data 3 = 6, but the world size is 4");
  // A model that cannot be split over the tensor-parallel ranks fails at start
  // (any vocabulary splits: it is padded to a multiple of the tensor size).
  ExpectError("train --config " + config +
                  " --set parallel.tensor=4 --set model.num_attention_heads=1"
                  " --set model.hidden_size=16",
              "model.num_attention_heads 1 is not divisible by parallel.tensor 4");
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST_F(CliTest, AModelThatCannotFitIsRefusedBeforeItIsAllocated) {
  // 4.4e12 parameters (memory_check_test.cc counts them), 64 TiB to train:
  // refused at start-up with the sizes, inside an 8 GiB address space, so
  // nothing near that size was asked for.
  prefix_ = testing::AddressLimitPrefix(8);
  const std::string config = WriteConfig("");
  ExpectError("train --config " + config + " --set model.hidden_size=1048576",
              std::vector<std::string>{"the model needs 65542.1 GiB per rank (weights 16385.4 GiB",
                                       " available (", "\nhint: split the model over more ranks"});
  ExpectError("export --config " + config + " --set model.hidden_size=1048576 --out " +
                  (dir_ / "e").string(),
              std::vector<std::string>{
                  "the model needs 32770.8 GiB per rank (weights 16385.4 GiB, gradients "
                  "16385.4 GiB)",
                  "\nhint: tetra export builds the whole model"});
  ExpectError("train --config " + config + " --set data.synthetic.num_tokens=1099511627776",
              std::vector<std::string>{"synthetic tokens 4096.0 GiB",
                                       "\nhint: lower data.synthetic.num_tokens"});
  // The limit leaves the tiny run itself alone.
  EXPECT_EQ(Run("train --config " + config).exit_code, 0);
}

TEST_F(CliTest, LogSettingsThatCannotWorkAreRefused) {
  ExpectError(
      "train --config " + WriteConfig("log { trace_path: \"/tmp/trace\" trace_steps: \"7-3\" }\n"),
      "log.trace_steps \"7-3\" is not a range of steps");
  ExpectError("train --config " + WriteConfig("log { eval_interval: 5 }\n"),
              "data.valid_path is empty");
}

// A recipe shortened below its warmup (the first thing a user tries) runs,
// warns once, and keeps the warmup formula lr * s / w.
TEST_F(CliTest, AShortenedRecipeRunsInsideItsWarmup) {
  const std::string metrics = (dir_ / "m.jsonl").string();
  RunResult r =
      Run("train --config " + std::string(TETRA_SOURCE_DIR) +
          "/configs/tiny_dense.textproto --set train.steps=3 --set log.metrics_path=" + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string warning = "warning: optimizer.warmup_steps 20 exceeds train.steps 3";
  const size_t first = r.out.find(warning);
  EXPECT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(warning, first + 1), std::string::npos) << "warned more than once";
  std::istringstream lines(ReadBytes(metrics));
  int step = 0;
  for (std::string line; std::getline(lines, line);) {
    ++step;
    const size_t at = line.find("\"lr\": ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_DOUBLE_EQ(std::stod(line.substr(at + 6)), 3e-3 * step / 20)
        << line;  // the recipe's lr 3e-3
  }
  EXPECT_EQ(step, 3);
}

// tetra report reads a run's layout from its metrics file: sizes that no run
// can have (a hand-edited or foreign file) are errors, not a division by zero.
TEST_F(CliTest, ReportRefusesLayoutsNoRunHas) {
  const std::string good =
      "\"world_size\": 4, \"tensor\": 2, \"pipeline\": 1, \"data\": 2, \"global_batch_size\": 8, "
      "\"micro_batch_size\": 2, \"seq_length\": 16, \"zero_stage\": 0";
  for (const auto& [layout, message] : std::vector<std::pair<std::string, std::string>>{
           {good + ", \"expert\": 0", "expert is 0, not a size"},
           {good + ", \"expert\": 3", "is not one a run can have"},
           {"\"world_size\": 5, \"tensor\": 2, \"pipeline\": 1, \"data\": 2, \"expert\": 1, "
            "\"global_batch_size\": 8, \"micro_batch_size\": 2, \"seq_length\": 16",
            "is not one a run can have"}}) {
    const fs::path metrics = dir_ / "run.jsonl";
    std::ofstream(metrics)
        << "{\"step\": 1, \"loss\": 3.5, \"tokens_per_s\": 100, \"step_time_s\": 0.5, " << layout
        << "}\n";
    ExpectError("report --out " + (dir_ / "report").string() + " " + metrics.string(), message);
  }
}

// The report's bubble theory is each run's schedule's (IdealBubbleFraction),
// named with its formula: three runs of the same layout, tp 1 x pp 2 x dp 2
// with m = 16 / (2 x 2) = 4 micro-batches per data-parallel rank, under
// 1F1B (p - 1) / (m + p - 1) = 1 / 5, ZB-H1 (p - 1) / (3m + p - 1) = 1 / 13
// (its W's fill two thirds of 1F1B's idle slots) and DualPipeV (2 chunks per
// rank, each 1 / 6 of a micro-batch's F + B_in + W; p - 1 idle chunk units)
// (p - 1) / (6m + p - 1) = 1 / 25, shown as 20.0%, 7.7% and 4.0%. Runs from
// before the schedule was written read as 1F1B.
TEST_F(CliTest, ReportBubbleTheoryFollowsEachRunsSchedule) {
  const std::string layout =
      "\"world_size\": 4, \"tensor\": 1, \"context\": 1, \"pipeline\": 2, \"data\": 2, \"expert\": "
      "1, "
      "\"global_batch_size\": 16, \"micro_batch_size\": 2, \"seq_length\": 16, \"zero_stage\": 0";
  std::string files;
  for (const auto& [name, schedule] : std::vector<std::pair<std::string, std::string>>{
           {"old", ""},
           {"zb", ", \"schedule\": \"ZB_H1\", \"virtual_stages\": 1"},
           {"dualpipe", ", \"schedule\": \"DUALPIPE_V\", \"virtual_stages\": 2"}}) {
    const fs::path metrics = dir_ / (name + ".jsonl");
    std::ofstream(metrics)
        << "{\"step\": 1, \"loss\": 3.5, \"tokens_per_s\": 100, \"step_time_s\": 0.5, "
           "\"bubble_fraction\": 0.25, "
        << layout << schedule << "}\n";
    files += " " + metrics.string();
  }
  RunResult r = Run("report --out " + (dir_ / "report").string() + files);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string md = ReadBytes(dir_ / "report" / "report.md");
  EXPECT_THAT(md,
              HasSubstr("| run | schedule | micro-batches | chunks per rank | measured | theory | "
                        "theory's formula |"));
  EXPECT_THAT(
      md,
      HasSubstr("| 4 ranks: tp 1 x pp 2 x dp 2 | 1F1B | 4 | 1 | 25.0% | 20.0% | (p-1)/(m+p-1) |"));
  EXPECT_THAT(md, HasSubstr("| 4 ranks: tp 1 x pp 2 x dp 2, ZB-H1 | ZB-H1 | 4 | 1 | 25.0% | 7.7% | "
                            "(p-1)/(3*m+p-1) |"));
  EXPECT_THAT(
      md, HasSubstr("| 4 ranks: tp 1 x pp 2 x dp 2, DualPipeV | DualPipeV | 4 | 2 | 25.0% | 4.0% | "
                    "(p-1)/(6*m+p-1) |"));

  // A schedule no config has, or one the run's sizes could not have run, is refused.
  for (const auto& [schedule, message] : std::vector<std::pair<std::string, std::string>>{
           {", \"schedule\": \"ZB_H2\"",
            "the first line's schedule is \"ZB_H2\", not a parallel.schedule name"},
           {", \"schedule\": 3",
            "the first line's schedule is a number, not a parallel.schedule name"},
           {", \"schedule\": \"ZB_H1\", \"virtual_stages\": 2",
            "the first line's schedule ZB_H1 with virtual_stages 2 cannot be what ran"}}) {
    const fs::path metrics = dir_ / "bad.jsonl";
    std::ofstream(metrics)
        << "{\"step\": 1, \"loss\": 3.5, \"tokens_per_s\": 100, \"step_time_s\": 0.5, " << layout
        << schedule << "}\n";
    ExpectError("report --out " + (dir_ / "report").string() + " " + metrics.string(), message);
  }
}

// The report names each multi-rank run's slowest rank: the one most often the
// slowest over the steps after the first, with the median ratio; a rank the
// run has not, or a ratio below 1, is refused.
TEST_F(CliTest, ReportNamesTheRankMostOftenTheSlowest) {
  const std::string layout =
      ", \"world_size\": 4, \"tensor\": 1, \"pipeline\": 1, \"data\": 4, \"expert\": 1, "
      "\"global_batch_size\": 8, \"micro_batch_size\": 2, \"seq_length\": 16";
  auto write = [&](const std::vector<std::pair<double, double>>& steps) {
    const fs::path metrics = dir_ / "run.jsonl";
    std::ofstream file(metrics);
    for (size_t i = 0; i < steps.size(); ++i) {
      file << "{\"step\": " << i + 1
           << ", \"loss\": 3.5, \"tokens_per_s\": 100, \"step_time_s\": 0.5, \"slowest_rank\": "
           << steps[i].first << ", \"straggler_ratio\": " << steps[i].second
           << (i == 0 ? layout : "") << "}\n";
    }
    return metrics.string();
  };
  // Step 1 (rank 0 at 9x: warm-up) is left out; rank 3 on 2 of the other 3
  // steps, ratios 1.5, 2.5 and 1.25 with median 1.5.
  const std::string run = write({{0, 9}, {3, 1.5}, {3, 2.5}, {1, 1.25}});
  RunResult r = Run("report --out " + (dir_ / "report").string() + " " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(ReadBytes(dir_ / "report" / "report.md"),
              HasSubstr("| 4 ranks: tp 1 x pp 1 x dp 4 | 3 | 2 of 3 | 1.50x |"));
  for (const auto& [steps, message] :
       std::vector<std::pair<std::vector<std::pair<double, double>>, std::string>>{
           {{{0, 1}, {4, 1.5}}, "line 2's slowest_rank 4 and straggler_ratio 1.5 are not a rank"},
           {{{0, 1}, {1.5, 1.5}}, "slowest_rank 1.5"},
           {{{0, 1}, {2, 0.5}}, "straggler_ratio 0.5 are not a rank of its 4 ranks and a ratio"}}) {
    ExpectError("report --out " + (dir_ / "report").string() + " " + write(steps), message);
  }
}

}  // namespace
}  // namespace tetra
