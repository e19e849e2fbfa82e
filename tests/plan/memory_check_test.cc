// CheckRankMemory against machines of stated sizes: absurd models, sequences
// and synthetic streams are refused with the numbers and a hint that fits the
// cause, the ranks sharing a machine share its memory, a GPU run is checked
// against its GPU, export needs only the weights, and none of the project's
// recipes is refused on the machines they are written for.
#include "plan/memory_check.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/configs.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

using testing::Message;
using testing::UserErrorShape;

constexpr double kGiB = 1024.0 * 1024 * 1024;

MachineMemory Host(double gib, int ranks = 1) {
  MachineMemory memory;
  memory.host_bytes = gib * kGiB;
  memory.host_source = "test";
  memory.host_ranks = ranks;
  return memory;
}

// The CLI tests' tiny model, with `sets` applied.
TrainerConfig Tiny(const std::vector<std::string>& sets = {}) {
  TrainerConfig config = testing::ConfigFromText(
      "model { vocab_size: 32 hidden_size: 16 num_hidden_layers: 1 num_attention_heads: 2 "
      "intermediate_size: 32 }\n"
      "train { steps: 3 global_batch_size: 4 micro_batch_size: 2 seq_length: 8 }\n");
  for (const std::string& set : sets) testing::SetField(&config, set);
  return config;
}

TrainerConfig Recipe(const std::string& name) { return testing::RecipeConfig(name); }

absl::Status Check(const TrainerConfig& config, const MachineMemory& machine,
                   MemoryUse use = MemoryUse::kTraining, const PlanLayout& layout = {}) {
  return CheckRankMemory(config, layout, use, machine);
}

TEST(MemoryCheckTest, AbsurdSizesAreRefusedWithTheNumbersAndAFittingHint) {
  struct Case {
    std::vector<std::string> sets;
    std::string hint;  // the hint names what to change
  };
  const std::vector<Case> cases = {
      {{"model.hidden_size=1048576"}, "split the model over more ranks"},
      {{"model.intermediate_size=2147483647"}, "split the model over more ranks"},
      {{"model.num_hidden_layers=1000000"}, "split the model over more ranks"},
      {{"train.seq_length=1000000000"}, "shorten train.seq_length"},
      {{"data.synthetic.num_tokens=1099511627776"}, "lower data.synthetic.num_tokens"},
      {{"data.synthetic.num_tokens=9223372036854775807"}, "lower data.synthetic.num_tokens"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Check(Tiny(c.sets), Host(24));
    const std::string sets = ::testing::PrintToString(c.sets);
    ASSERT_FALSE(status.ok()) << sets;
    EXPECT_THAT(Message(status), HasSubstr("the model needs ")) << sets;
    EXPECT_THAT(Message(status), HasSubstr(" per rank (weights ")) << sets;
    EXPECT_THAT(Message(status), HasSubstr("but this machine has 24.0 GiB available (test)"))
        << sets;
    EXPECT_THAT(Message(status), HasSubstr("\nhint: " + c.hint)) << sets;
    EXPECT_THAT(Message(status), UserErrorShape()) << sets;
  }
}

TEST(MemoryCheckTest, NamesEachPartInGiB) {
  // hidden c = 2^20, 2 heads: q, k, v, o are 4 c^2 parameters, the MLP
  // 3 x 32 c, the embedding and head 2 x 128 c (the vocabulary of 32 padded
  // to 128 rows), the norms 3 c: 4 c^2 + 355 c = 4,398,418,755,584
  // parameters, 4 B of weights and of gradients each (16384 GiB + 355 x 4 MiB
  // = 16385.39 GiB), 8 B of AdamW moments (32770.77 GiB).
  const absl::Status status = Check(Tiny({"model.hidden_size=1048576"}), Host(24));
  EXPECT_THAT(Message(status),
              HasSubstr("weights 16385.4 GiB, gradients 16385.4 GiB, AdamW moments 32770.8 GiB"));
}

TEST(MemoryCheckTest, RanksOnOneMachineShareIt) {
  // About 1.05 GiB per rank (hidden 4096: 4 x 4096^2 x 16 B = 1 GiB of attention).
  const TrainerConfig config = Tiny({"model.hidden_size=4096", "model.num_attention_heads=4"});
  EXPECT_TRUE(Check(config, Host(2, 1)).ok());
  const absl::Status shared = Check(config, Host(2, 4));
  EXPECT_THAT(Message(shared), HasSubstr("per rank ("));
  EXPECT_THAT(Message(shared),
              HasSubstr("for each of the 4 ranks on this machine but this machine has 2.0 GiB"));
  // Tensor parallelism over 4 ranks splits the attention matrices.
  EXPECT_TRUE(
      Check(config, Host(2, 4), MemoryUse::kTraining, {.mesh = MeshShape::Of(4, 1, 1)}).ok());
}

TEST(MemoryCheckTest, AGpuRunIsCheckedAgainstItsGpuAndItsDataAgainstTheHost) {
  MachineMemory gpu = Host(64);
  gpu.device_bytes = 80 * kGiB;
  gpu.device_name = "GPU 0 (test)";
  const TrainerConfig bench = Recipe("bench_h200_1b.textproto");
  EXPECT_TRUE(Check(bench, gpu).ok()) << Check(bench, gpu);
  TrainerConfig wide = bench;
  wide.mutable_model()->set_hidden_size(1048576);
  EXPECT_THAT(Message(Check(wide, gpu)), HasSubstr("but GPU 0 (test) has 80.0 GiB free"));
  TrainerConfig long_stream = bench;
  long_stream.mutable_data()->mutable_synthetic()->set_num_tokens(int64_t{1} << 40);
  EXPECT_THAT(
      Message(Check(long_stream, gpu)),
      HasSubstr(
          "the training data needs 4096.0 GiB per rank (synthetic tokens 4096.0 GiB) but this "
          "machine has 64.0 GiB"));
}

TEST(MemoryCheckTest, TheGpuBenchmarksFitOneH200) {
  MachineMemory h200 = Host(64);
  h200.device_bytes = 139 * kGiB;  // what an H200 reports free
  h200.device_name = "GPU 0 (H200)";
  for (const char* recipe : {"bench_h200_1b.textproto", "bench_h200_moe.textproto"}) {
    const TrainerConfig bench = Recipe(recipe);
    EXPECT_TRUE(Check(bench, h200).ok()) << recipe << ": " << Check(bench, h200);
  }
  // The MoE one needs the H200: its 3.1B parameters' fp32 weights, gradients
  // and AdamW moments alone are 50 GiB.
  MachineMemory a100 = h200;
  a100.device_bytes = 40 * kGiB;
  EXPECT_THAT(Message(Check(Recipe("bench_h200_moe.textproto"), a100)),
              HasSubstr("has 40.0 GiB free"));
}

TEST(MemoryCheckTest, ExportNeedsOnlyWeightsAndGradients) {
  // hidden 8192: 4 x 8192^2 = 268M attention parameters, 8 B each for export
  // (2 GiB), 16 B for training (4 GiB).
  const TrainerConfig config = Tiny({"model.hidden_size=8192"});
  EXPECT_FALSE(Check(config, Host(3)).ok());
  EXPECT_TRUE(Check(config, Host(3), MemoryUse::kWeights).ok());
  const absl::Status status = Check(config, Host(1), MemoryUse::kWeights);
  EXPECT_THAT(Message(status), HasSubstr("(weights 1.0 GiB, gradients 1.0 GiB)"));
  EXPECT_THAT(Message(status),
              HasSubstr("\nhint: tetra export builds the whole model in one process"));
}

TEST(MemoryCheckTest, UnknownMachineMemoryChecksNothing) {
  EXPECT_TRUE(Check(Tiny({"model.hidden_size=1048576"}), MachineMemory{}).ok());
}

TEST(MemoryCheckTest, TheProjectsCpuRecipesFitALaptop) {
  // Each CPU recipe on its own layout, all its ranks on one 8 GiB machine.
  struct Run {
    std::string recipe;
    PlanLayout layout;
  };
  for (const Run& run : std::vector<Run>{
           {"tiny_dense.textproto", {}},
           {"tiny_moe.textproto", {}},
           {"bench_cpu_35m.textproto", {}},
           {"bench_cpu_scaling.textproto", {.mesh = MeshShape::Of(1, 1, 8)}},
           {"tiny_dense_tp2.textproto", {.mesh = MeshShape::Of(2, 1, 1)}},
           {"tiny_dense_dp2_zero1.textproto", {.mesh = MeshShape::Of(1, 1, 2), .zero_stage = 1}},
           {"tiny_dense_tp2_dp2_sp.textproto", {.mesh = MeshShape::Of(2, 1, 2), .zero_stage = 1}},
           {"moe_small_tp2_pp2_ep2.textproto",
            {.mesh = MeshShape::Of(2, 2, 2, 2), .zero_stage = 1}},
       }) {
    const int ranks = run.layout.mesh.world;
    const absl::Status status =
        Check(Recipe(run.recipe), Host(8, ranks), MemoryUse::kTraining, run.layout);
    EXPECT_TRUE(status.ok()) << run.recipe << ": " << status;
  }
}

TEST(MemoryCheckTest, ReadsThisMachine) {
  const MachineMemory machine = ReadMachineMemory(3, /*gpu=*/false);
  ASSERT_TRUE(machine.host_bytes.has_value());  // /proc/meminfo at least
  EXPECT_GT(*machine.host_bytes, 0);
  EXPECT_FALSE(machine.host_source.empty());
  EXPECT_EQ(machine.host_ranks, 3);
  EXPECT_FALSE(machine.device_bytes.has_value());
}

}  // namespace
}  // namespace tetra
