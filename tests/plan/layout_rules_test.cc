// CheckLayoutRuns: each rule the trainer applies to a layout refuses a
// layout with its numbers and a hint line, and the layout next to it, which
// keeps the rule, runs.
#include "plan/layout_rules.h"

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

// Llama-3-70B size: 80 layers, 64 heads, 8 key-value heads, MLP 28672, no
// experts; 1024 sequences of 8192 tokens per step, micro-batches of 1.
TrainerConfig Llama(const std::vector<std::string>& sets = {}) {
  TrainerConfig config = testing::RecipeConfig("llama3_70b_size.textproto");
  for (const std::string& set : sets) testing::SetField(&config, set);
  return config;
}

// DeepSeek-V3 size: 61 layers, 256 routed experts of width 2048, one
// multi-token prediction depth; 15360 sequences of 4096 tokens per step.
TrainerConfig DeepSeek(const std::vector<std::string>& sets = {}) {
  TrainerConfig config = testing::RecipeConfig("deepseek_v3_size.textproto");
  for (const std::string& set : sets) testing::SetField(&config, set);
  return config;
}

struct Case {
  std::string name;
  TrainerConfig config;
  MeshShape refused, runs;  // MeshShape::Of(tp, pp, dp, ep, cp)
  std::string message;
};

TEST(LayoutRulesTest, EachRuleRefusesWithItsNumbersAndTheNeighbouringLayoutRuns) {
  const std::vector<std::string> no_mtp = {"model.num_nextn_predict_layers=0"};
  const std::vector<Case> cases = {
      {"2 x cp chunks: 32768 = 2^15 cuts into 8, not into 6", Llama({"train.seq_length=32768"}),
       MeshShape::Of(8, 1, 4, 1, 3), MeshShape::Of(8, 1, 4, 1, 4),
       "train.seq_length 32768 is not a multiple of 2 x parallel.context 3 = 6"},
      {"sequence parallelism splits the 8200 / cp 2 = 4100 rows a rank holds over tp: 4 divides "
       "them, 8 not",
       Llama({"train.seq_length=8200"}), MeshShape::Of(8, 1, 4, 1, 2), MeshShape::Of(4, 1, 8, 1, 2),
       "parallel.sequence_parallel splits the 4100 token rows"},
      {"tp 8 splits the 8200 rows of cp 1, not the 2050 of cp 4", Llama({"train.seq_length=8200"}),
       MeshShape::Of(8, 1, 2, 1, 4), MeshShape::Of(8, 1, 8, 1, 1),
       "parallel.sequence_parallel splits the 2050 token rows"},
      {"multi-token prediction runs only without context parallelism", DeepSeek(),
       MeshShape::Of(1, 16, 64, 64, 2), MeshShape::Of(1, 16, 128, 64, 1),
       "model.num_nextn_predict_layers 1 with parallel.context 2: multi-token prediction under "
       "context "
       "parallelism is not implemented yet"},
      {"expert groups come out of data x context: 64 divides 32 x 2, not 16 x 2", DeepSeek(no_mtp),
       MeshShape::Of(1, 16, 16, 64, 2), MeshShape::Of(1, 16, 32, 64, 2),
       "expert 64 does not divide data 16 x context 2"},
      {"experts split evenly", DeepSeek(no_mtp), MeshShape::Of(1, 16, 128, 3),
       MeshShape::Of(1, 16, 128, 4), "expert 3 does not divide model.moe.n_routed_experts 256"},
      {"expert parallelism needs experts", Llama(), MeshShape::Of(1, 1, 8, 2),
       MeshShape::Of(1, 1, 8, 1), "expert 2: the model has no routed experts"},
      {"tensor-parallel experts split their width", DeepSeek(no_mtp), MeshShape::Of(3, 1, 16, 8),
       MeshShape::Of(4, 1, 16, 8), "tensor 3 does not divide model.moe.moe_intermediate_size 2048"},
      {"dense layers run under sequence parallelism: tp 2 does not split 4097 rows",
       Llama({"train.seq_length=4097"}), MeshShape::Of(2, 1, 8), MeshShape::Of(1, 1, 8),
       "parallel.sequence_parallel splits the 4097 token rows"},
      {"one layer at least per stage", Llama(), MeshShape::Of(1, 160, 1), MeshShape::Of(1, 80, 2),
       "pipeline 160 exceeds model.num_hidden_layers 80"},
      {"whole micro-batches per data-parallel rank", Llama(), MeshShape::Of(8, 1, 3),
       MeshShape::Of(8, 1, 4),
       "data 3: train.global_batch_size 1024 is not a multiple of train.micro_batch_size 1 x data "
       "3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status refused = CheckLayoutRuns(c.config, c.refused);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(Message(refused), HasSubstr(c.message));
    EXPECT_THAT(Message(refused), UserErrorShape());
    EXPECT_TRUE(CheckLayoutRuns(c.config, c.runs).ok()) << CheckLayoutRuns(c.config, c.runs);
  }
  // The 3-way split that 32768 refuses, of a sequence that has the factor.
  EXPECT_TRUE(
      CheckLayoutRuns(Llama({"train.seq_length=98304"}), MeshShape::Of(8, 1, 4, 1, 3)).ok());
  // A model with experts keeps its 4097 rows whole on each tensor-parallel rank.
  EXPECT_TRUE(
      CheckLayoutRuns(DeepSeek({"train.seq_length=4097"}), MeshShape::Of(2, 1, 16, 8)).ok());
}

}  // namespace
}  // namespace tetra
