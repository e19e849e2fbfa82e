// `tetra plan` end to end: the built binary lays out Megatron-LM's 16-GPU
// example and an MoE layout as JSON with the groups worked out by hand, prints
// the table and the node warnings, draws pipeline schedules (ZB-H1 and
// DualPipeV's weight-gradient cells too) as timelines worked out by hand, and
// refuses bad layouts and schedules with the numbers.
#include <sys/wait.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/address_limit.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::tetra::testing::AddressLimitPrefix;
using ::tetra::testing::ReadBytes;
using ::tetra::testing::ScratchDir;
using ::tetra::testing::WriteBytes;
using Groups = std::vector<std::vector<int>>;

// The plan's JSON: objects (keys kept in order), arrays, integers and plain
// strings.
struct Json {
  enum Kind { kNull, kNumber, kString, kArray, kObject } kind = kNull;
  long number = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json& operator[](const std::string& key) const {
    static const Json kMissing;
    for (const auto& [name, value] : fields) {
      if (name == key) return value;
    }
    return kMissing;
  }
  std::vector<std::string> Keys() const {
    std::vector<std::string> keys;
    for (const auto& field : fields) keys.push_back(field.first);
    return keys;
  }
  Groups AsGroups() const {
    Groups groups;
    for (const Json& group : items) {
      groups.emplace_back();
      for (const Json& rank : group.items) groups.back().push_back(static_cast<int>(rank.number));
    }
    return groups;
  }
};

// The plan as these checks read it, from tetra's JSON reader (core/json.h).
Json ToJson(const JsonValue& v) {
  Json json;
  switch (v.kind) {
    case JsonValue::Kind::kNumber:
      json.kind = Json::kNumber;
      json.number = static_cast<long>(v.number);
      break;
    case JsonValue::Kind::kString:
      json.kind = Json::kString;
      json.text = v.string;
      break;
    case JsonValue::Kind::kArray:
      json.kind = Json::kArray;
      for (const JsonValue& item : v.items) json.items.push_back(ToJson(item));
      break;
    case JsonValue::Kind::kObject:
      json.kind = Json::kObject;
      for (size_t i = 0; i < v.keys.size(); ++i)
        json.fields.emplace_back(v.keys[i], ToJson(v.items[i]));
      break;
    default:
      break;
  }
  return json;
}

struct RunResult {
  int exit_code;
  std::string out, err;
};

class PlanTest : public ::testing::Test {
 protected:
  // Runs `tetra plan --config <config text> <args>`.
  RunResult Plan(const std::string& config, const std::string& args) {
    const std::string dir = ScratchDir("plan_test");
    WriteBytes(dir + "/plan.textproto", config);
    // Every plan runs in 8 GiB of address space: none needs more, and one
    // that tried would fail at once, not swap.
    const std::string command = AddressLimitPrefix(8) + std::string(TETRA_BINARY) +
                                " plan --config " + dir + "/plan.textproto " + args + " >" + dir +
                                "/out 2>" + dir + "/err";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadBytes(dir + "/out"),
            ReadBytes(dir + "/err")};
  }

  Json PlanJson(const std::string& config, const std::string& args) {
    RunResult r = Plan(config, args + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const absl::StatusOr<JsonValue> plan = ParseJson(r.out);
    EXPECT_TRUE(plan.ok()) << plan.status() << "\n" << r.out;
    return plan.ok() ? ToJson(*plan) : Json{};
  }

  // Expects exit code 1 with "tetra: error: ", `message` and a hint line.
  void ExpectError(const std::string& config, const std::string& args, const std::string& message) {
    RunResult r = Plan(config, args);
    EXPECT_EQ(r.exit_code, 1) << args << "\nstderr: " << r.err;
    EXPECT_THAT(r.err, HasSubstr("tetra: error: ")) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_THAT(r.err, HasSubstr("\nhint: ")) << args;
  }
};

// One rank object as the plan prints it, to compare field by field.
std::vector<std::pair<std::string, long>> RankFields(const Json& rank) {
  std::vector<std::pair<std::string, long>> fields;
  for (const auto& [name, value] : rank.fields) fields.emplace_back(name, value.number);
  return fields;
}

TEST_F(PlanTest, MegatronSixteenGpuExampleAsJson) {
  // parallel_state.py's docstring: 16 GPUs, tensor 2, pipeline 4 (data 2).
  // The config has no model section: plan checks layouts only.
  const Json plan = PlanJson("parallel { tensor: 2 pipeline: 4 }\n", "--world 16");
  EXPECT_EQ(plan.Keys(), (std::vector<std::string>{"world", "ranks", "groups"}));
  EXPECT_EQ(plan["world"].number, 16);
  ASSERT_EQ(plan["ranks"].items.size(), 16u);
  // g5 = tp 1 + 2 x dp 0 + 4 x pp 1; g10 = tp 0 + 2 x dp 1 + 4 x pp 2.
  using Fields = std::vector<std::pair<std::string, long>>;
  EXPECT_EQ(
      RankFields(plan["ranks"].items[5]),
      (Fields{{"rank", 5}, {"tp", 1}, {"cp", 0}, {"ep", 0}, {"dp", 0}, {"edp", 0}, {"pp", 1}}));
  EXPECT_EQ(
      RankFields(plan["ranks"].items[10]),
      (Fields{{"rank", 10}, {"tp", 0}, {"cp", 0}, {"ep", 0}, {"dp", 1}, {"edp", 1}, {"pp", 2}}));
  const Json& groups = plan["groups"];
  EXPECT_EQ(groups["tp"].AsGroups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(groups["pp"].AsGroups(),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  const Groups data = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  EXPECT_EQ(groups["dp"].AsGroups(), data);
  EXPECT_EQ(groups["edp"].AsGroups(), data);  // expert 1: expert-data = data
  EXPECT_EQ(groups["ep"].AsGroups().size(), 16u);
  EXPECT_EQ(groups["cp"].AsGroups().size(), 16u);
  EXPECT_EQ(groups["embd"].AsGroups(), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
}

TEST_F(PlanTest, MoeLayoutThroughSetOverrides) {
  // tensor 2, pipeline 2, data 4, expert 2: expert rank = tp + 2 ep + 4 edp + 8 pp.
  const Json plan = PlanJson("parallel { tensor: 2 pipeline: 4 }\n",
                             "--world 16 --set parallel.pipeline=2 --set parallel.expert=2");
  EXPECT_EQ(plan["groups"]["ep"].AsGroups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(plan["groups"]["edp"].AsGroups(),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(plan["groups"]["dp"].AsGroups(),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(plan["ranks"].items[13]["ep"].number, 0);  // 13 = 1 + 0 + 4 + 8
  EXPECT_EQ(plan["ranks"].items[13]["edp"].number, 1);
}

TEST_F(PlanTest, MegatronTpPpDpOrder) {
  // Megatron-LM's --use-tp-pp-dp-mapping order for a dense model, tensor 2,
  // pipeline 2, data 4: rank = tp + 2 pp + 4 dp (mesh_test works it out).
  const Json plan =
      PlanJson("parallel { tensor: 2 pipeline: 2 order: \"tp-cp-ep-pp-dp\" }\n", "--world 16");
  EXPECT_EQ(plan["groups"]["pp"].AsGroups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(plan["groups"]["dp"].AsGroups(),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(plan["ranks"].items[11]["dp"].number, 2);  // 11 = 1 + 2 + 8
  EXPECT_EQ(plan["ranks"].items[11]["pp"].number, 1);
}

TEST_F(PlanTest, TableAndNodeWarnings) {
  // Tensor 16 on nodes of 8 GPUs: both tensor groups cross a node boundary.
  RunResult r = Plan("parallel { tensor: 16 }\n", "--world 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("32 ranks = tensor 16 x context 1 x pipeline 1 x data 2"));
  EXPECT_THAT(r.out, HasSubstr("rank  node  gpu  tp  cp  ep  dp  edp  pp\n"));
  EXPECT_THAT(r.out, HasSubstr("\n    19     2    3   3   0   0   1    1   0\n"));  // 19 = 16 + 3
  EXPECT_THAT(r.out, HasSubstr("pp groups (32):"));
  EXPECT_THAT(r.err, HasSubstr("tetra: warning: 2 of 2 tp groups span nodes of 8 GPUs"));
  EXPECT_THAT(r.err, HasSubstr("\nhint: "));
  // The same layout on nodes of 16 GPUs needs no warning.
  r = Plan("parallel { tensor: 16 }\n", "--world 32 --gpus-per-node 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("tp groups span")));
  EXPECT_THAT(r.out, HasSubstr("\n    19     1    3   3"));  // node 1, GPU 3
}

TEST_F(PlanTest, BadLayoutsNameTheNumbers) {
  ExpectError("parallel { tensor: 2 pipeline: 4 data: 3 }\n", "--world 16",
              "tensor 2 x context 1 x pipeline 4 x data 3 = 24, but the world size is 16");
  ExpectError("parallel { tensor: 2 pipeline: 2 expert: 3 }\n", "--world 16",
              "parallel.expert 3 does not divide data 4 x context 1 = 4");
  ExpectError("parallel { order: \"tp-cp-xx-dp-pp\" }\n", "--world 4",
              "parallel.order \"tp-cp-xx-dp-pp\" has unknown axis \"xx\"");
  ExpectError("parallel { order: \"tp-cp-dp-pp\" }\n", "--world 4", "lacks ep");
  ExpectError("parallel { tensor: 2 pipeline: 2 expert: 2 order: \"tp-cp-ep-pp-dp\" }\n",
              "--world 16",
              "gives dense and expert weights different pipeline groups (rank 0: dense [0, 2], "
              "expert [0, 4])");
  ExpectError("parallel { tensor: 4 }\n", "--world 10", "the world size 10 is not a multiple of 4");
}

TEST_F(PlanTest, PipelineScheduleTimeline) {
  // 1F1B, 4 stages, 8 / (1 x data 1) = 8 micro-batches; F 1 unit, B 2, 3
  // columns a unit. Rank 3 gets micro-batch k's activation at 3 + k (rank 0..2
  // run F0 at 0, 1, 2), so it runs F0 [3,4), B0 [4,6), F1 [6,7), B1 [7,9), ...;
  // rank 0 runs F0..F3 [0,4), then waits for B0's gradient until 10.
  RunResult r =
      Plan("parallel { pipeline: 4 }\ntrain { global_batch_size: 8 micro_batch_size: 1 }\n",
           "--world 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("\npipeline schedule 1F1B, 4 stages, 8 micro-batches: bubble 27.3% simulated, "
                "(p-1)/(m+p-1) = 27.3%; peak activations per rank 4 3 2 1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nrank 0 | F0 F1 F2 F3                   B0--- F4 B1---"));
  EXPECT_THAT(r.out, HasSubstr("\nrank 3 |          F0 B0--- F1 B1--- F2 B2--- F3 B3---"));

  // GPipe on 2 stages, 2 micro-batches: rank 1 runs F0 [1,2), F1 [2,3),
  // B0 [3,5), B1 [5,7); rank 0 waits for each gradient: B0 [5,7), B1 [7,9).
  r = Plan(
      "parallel { pipeline: 2 schedule: GPIPE }\ntrain { global_batch_size: 4 micro_batch_size: 2 "
      "}\n",
      "--world 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("pipeline schedule GPipe, 2 stages, 2 micro-batches: bubble 33.3% simulated"));
  EXPECT_THAT(r.out,
              HasSubstr("\nrank 0 | F0 F1          B0--- B1---\nrank 1 |    F0 F1 B0--- B1---\n"));

  // Interleaved, 2 stages x 2 chunks, 2 micro-batches: (p-1)/(v*m+p-1) = 1/5;
  // chunk letters a, b. Rank 1 warms up with (v - 1) p = 2 forwards, rank 0
  // with all 4 (2 (p - 1) + 2 = 4).
  r = Plan(
      "parallel { pipeline: 2 virtual_stages: 2 }\nmodel { num_hidden_layers: 4 }\n"
      "train { global_batch_size: 2 micro_batch_size: 1 }\n",
      "--world 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("pipeline schedule interleaved 1F1B, 2 stages x 2 chunks, 2 micro-batches: bubble "
                "20.0% simulated, (p-1)/(v*m+p-1) = 20.0%; peak activations per rank 4 3"));
  EXPECT_THAT(r.out, HasSubstr("\nrank 0 | F0a F1a F0b F1b"));

  // No pipeline, no schedule.
  r = Plan("parallel { tensor: 2 }\n", "--world 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("pipeline schedule")));
}

TEST_F(PlanTest, SplitBackwardScheduleTimelines) {
  // ZB-H1, 4 stages, 8 micro-batches, F = B = W = 1 unit (3 columns). Rank 3
  // gets micro-batch k's activation at 3 + 2k for k < 4 and runs F_k B_k in
  // turn, then W0, the first of the 3 W's it postpones; rank 0 runs F0..F3
  // [0,4), waits for B0's input gradient, which leaves rank 3 at 5 and
  // climbs a rank per unit: B0 [7,8), then W0 and F4. Bubble (p-1)/(3m+p-1)
  // = 3/27; every rank holds up to p = 4 micro-batches (until their W).
  RunResult r = Plan("train { global_batch_size: 8 micro_batch_size: 1 }\n",
                     "--world 4 --set parallel.pipeline=4 --set parallel.schedule=ZB_H1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("\npipeline schedule ZB-H1, 4 stages, 8 micro-batches: bubble 11.1% simulated, "
                "(p-1)/(3*m+p-1) = 11.1%; peak activations per rank 4 4 4 4\n"
                "time units: F 1, B 1, W 1; blank = idle\n"));
  EXPECT_THAT(r.out, HasSubstr("\nrank 0 | F0 F1 F2 F3          B0 W0 F4"));
  EXPECT_THAT(r.out, HasSubstr("\nrank 3 |          F0 B0 F1 B1 F2 B2 F3 B3 W0"));

  // DualPipeV, 2 ranks x 2 chunks in a V, 4 micro-batches (schedule_checker_test's
  // DualPipeVTimelineWorkedByHand): 4 columns a unit, every cell 1 unit,
  // rank 0 idle once at 15, rank 1 at 0. Bubble (p-1)/(6*m+p-1) = 1/25.
  r = Plan(
      "parallel { pipeline: 2 virtual_stages: 2 schedule: DUALPIPE_V }\nmodel { num_hidden_layers: "
      "4 }\n"
      "train { global_batch_size: 4 micro_batch_size: 1 }\n",
      "--world 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "\npipeline schedule DualPipeV, 2 stages x 2 chunks, 4 micro-batches: bubble 4.0% "
          "simulated, (p-1)/(6*m+p-1) = 4.0%; peak activations per rank 5 5 (micro-batch "
          "chunks, 1/2 of a stage each)\ntime units: F 1, B 1, W 1 per chunk; blank = idle\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "\nrank 0 | F0a F1a F2a F0b B0b W0b F1b F3a B1b W1b F2b B0a W0a B2b W2b     F3b B1a W1a "
          "B3b W3b B2a W2a B3a W3a\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "\nrank 1 |     F0a F0b F1a F1b F2a B0b W0b F2b B0a W0a F3a B1b W1b F3b B1a W1a B2b "
          "W2b B2a W2a B3b B3a W3b W3a\n"));
}

TEST_F(PlanTest, SchedulesThatCannotRunNameTheNumbers) {
  // 2 data-parallel ranks: 12 / (1 x 2) = 6 micro-batches on 4 stages.
  ExpectError(
      "parallel { pipeline: 4 virtual_stages: 2 }\nmodel { num_hidden_layers: 8 }\n"
      "train { global_batch_size: 12 micro_batch_size: 1 }\n",
      "--world 8", "needs the micro-batches per step, 6, to be a multiple of parallel.pipeline 4");
  ExpectError(
      "parallel { pipeline: 2 virtual_stages: 3 }\nmodel { num_hidden_layers: 8 }\n"
      "train { global_batch_size: 4 micro_batch_size: 1 }\n",
      "--world 2",
      "model.num_hidden_layers = 8 does not split evenly over 6 virtual pipeline stages");
  ExpectError("parallel { pipeline: 2 }\ntrain { global_batch_size: 6 micro_batch_size: 4 }\n",
              "--world 2",
              "train.global_batch_size 6 is not a multiple of train.micro_batch_size 4 x "
              "data-parallel size 1 = 4");
  ExpectError(
      "parallel { pipeline: 4 virtual_stages: 2 schedule: DUALPIPE_V }\nmodel { num_hidden_layers: "
      "8 }\n"
      "train { global_batch_size: 6 micro_batch_size: 1 }\n",
      "--world 4",
      "the DualPipeV schedule needs at least 2 x parallel.pipeline = 8 micro-batches per step, but "
      "there "
      "are 6");
  ExpectError(
      "parallel { pipeline: 2 schedule: ZB_H1 virtual_stages: 2 }\nmodel { num_hidden_layers: 4 "
      "}\n",
      "--world 2",
      "the ZB-H1 schedule runs 1 model chunk per rank, but parallel.virtual_stages is 2");
}

TEST_F(PlanTest, BadFlags) {
  const std::string config = "parallel { tensor: 2 }\n";
  ExpectError(config, "", "needs --config FILE.textproto and --world N");
  ExpectError(config, "--world 0", "--world \"0\" is not a whole number of at least 1");
  ExpectError(config, "--world 8 --gpus-per-node x", "--gpus-per-node \"x\"");
  ExpectError(config, "--world 8 --set parallel.tensr=2", "did you mean \"tensor\"");
  ExpectError(config, "--world 8 --nodes 2", "unknown flag --nodes");
}

TEST_F(PlanTest, WorldsTooLargeToLayOutAreRefused) {
  // 2^30 ranks would be about 800 GB of groups; refused before any is built.
  ExpectError("", "--world 1073741824",
              "--world gives 1073741824 ranks, more than the 1048576 plan lays out");
  ExpectError("", "--world 1073741824 --json", "more than the 1048576 plan lays out");
  // A cluster's nodes x devices_per_node (formerly an int overflow) too.
  const std::string cluster = ScratchDir("plan_test") + "/huge.textproto";
  WriteBytes(cluster, "name: \"huge\" nodes: 1073741824 devices_per_node: 8\n");
  ExpectError(
      "", "--cluster " + cluster,
      "the cluster's nodes x devices_per_node gives 8589934592 ranks, more than the 1048576");
  // The planner's own 2048-rank cluster still plans.
  const RunResult h800 =
      Plan("model { moe { n_routed_experts: 8 num_experts_per_tok: 2 moe_intermediate_size: 16 } }",
           "--cluster " + std::string(TETRA_SOURCE_DIR) + "/configs/clusters/h800_2048.textproto");
  EXPECT_EQ(h800.exit_code, 0) << h800.err;
}

TEST_F(PlanTest, ClusterPlansRefuseModelsThePlannerCannotSize) {
  // Each divided by zero (SIGFPE) in the planner before.
  const std::string cluster =
      "--cluster " + std::string(TETRA_SOURCE_DIR) + "/configs/clusters/a100_64.textproto";
  ExpectError("model { num_attention_heads: 0 }", cluster, "model.num_attention_heads is 0");
  ExpectError("train { micro_batch_size: 0 }", cluster,
              "train.micro_batch_size 0 must be positive");
  ExpectError("parallel { dp_bucket_mb: 0 }", cluster, "parallel.dp_bucket_mb is 0");
}

// The planner sizes the model tetra train would build: with init_from a
// model directory, its config.json's (it sized the recipe's default model, a
// few hundred kB, before).
TEST_F(PlanTest, ClusterPlansTheModelOfInitFromsConfigJson) {
  const std::string model_dir = ScratchDir("plan_test_llama_1b");
  // Llama-3.2-1B's shape: 1.24 billion parameters.
  WriteBytes(model_dir + "/config.json",
             R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                 "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "num_hidden_layers": 16, "vocab_size": 128256, "rms_norm_eps": 1e-05,
                 "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu",
                 "head_dim": 64})");
  const Json plan = PlanJson("init_from: \"" + model_dir + "\"",
                             "--world 8 --cluster " + std::string(TETRA_SOURCE_DIR) +
                                 "/configs/clusters/a100_64.textproto");
  bool found = false;
  for (const Json& layout : plan["layouts"].items) {
    if (layout["tp"].number != 1 || layout["pp"].number != 1) continue;
    found = true;
    EXPECT_GT(layout["weights_bytes"].number, 2000000000L) << "a 1.24e9-parameter model's weights";
  }
  EXPECT_TRUE(found);
}

// Published checkpoints' config.json files (tests/checkpoint/published_configs),
// each alone in its directory as init_from: accepted, with the parameter
// count transformers 4.57 builds from the same file (AutoModelForCausalLM
// on the meta device; the sizes the model pages give), or refused naming
// the key tetra does not implement.
struct PublishedConfig {
  std::string model;
  std::string architecture;  // accepted: the class tetra plans; refused: ""
  int64_t parameters;        // accepted: transformers' count
  std::string refusal;       // refused: a part of the message
};

class PublishedConfigTest : public PlanTest,
                            public ::testing::WithParamInterface<PublishedConfig> {};

TEST_P(PublishedConfigTest, IsPlannedWithItsSizeOrRefusedNamingTheKey) {
  const PublishedConfig& c = GetParam();
  const std::string model_dir = ScratchDir("published_" + c.model);
  WriteBytes(model_dir + "/config.json",
             ReadBytes(std::string(TETRA_SOURCE_DIR) + "/tests/checkpoint/published_configs/" +
                       c.model + "/config.json"));
  const std::string recipe = "init_from: \"" + model_dir + "\" train { seq_length: 4096 }";
  const std::string cluster =
      "--cluster " + std::string(TETRA_SOURCE_DIR) + "/configs/clusters/h800_2048.textproto";
  if (c.architecture.empty()) {
    ExpectError(recipe, cluster, c.refusal);
    return;
  }
  const Json plan = PlanJson(recipe, cluster + " --world 64");
  EXPECT_EQ(plan["model"]["architecture"].text, c.architecture);
  EXPECT_EQ(plan["model"]["parameters"].number, c.parameters);
  EXPECT_FALSE(plan["layouts"].items.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Hub, PublishedConfigTest,
    ::testing::Values(PublishedConfig{"Llama-3.1-8B", "LlamaForCausalLM", 8030261248, ""},
                      PublishedConfig{"Llama-3.2-1B", "LlamaForCausalLM", 1235814400, ""},
                      PublishedConfig{"SmolLM2-1.7B", "LlamaForCausalLM", 1711376384, ""},
                      PublishedConfig{"Mistral-7B-v0.3", "MistralForCausalLM", 7248023552, ""},
                      PublishedConfig{"Qwen2.5-7B", "Qwen2ForCausalLM", 7615616512, ""},
                      PublishedConfig{"Qwen3-8B", "Qwen3ForCausalLM", 8190735360, ""},
                      PublishedConfig{"Qwen3-30B-A3B", "Qwen3MoeForCausalLM", 30532122624, ""},
                      PublishedConfig{"Mixtral-8x7B-v0.1", "MixtralForCausalLM", 46702792704, ""},
                      // Its weights are fp8: refused until converted to bf16.
                      PublishedConfig{
                          "DeepSeek-V3", "", 0,
                          "\"quantization_config\" says the weights are stored quantized"}),
    [](const ::testing::TestParamInfo<PublishedConfig>& info) {
      std::string name = info.param.model;
      for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

}  // namespace
}  // namespace tetra
