#include "observe/flops.h"

#include "gtest/gtest.h"

namespace tetra {
namespace {

ModelConfig Small(bool tie) {
  ModelConfig c;
  c.set_vocab_size(100);
  c.set_hidden_size(16);
  c.set_num_hidden_layers(2);
  c.set_num_attention_heads(4);  // head_dim 4
  c.set_num_key_value_heads(2);
  c.set_intermediate_size(24);
  c.set_tie_word_embeddings(tie);
  return c;
}

// Counted by hand: per layer q 16x16 + k 16x8 + v 16x8 + o 16x16 = 768,
// MLP 3 x 16 x 24 = 1152, two norms 32: 1952; two layers 3904, final norm 16,
// LM head 100 x 16 = 1600 (the input embedding is not counted): 5520.
TEST(FlopsTest, ActiveParametersExcludeTheInputEmbedding) {
  EXPECT_EQ(ActiveParameters(Small(false)), 5520);
  // A tied head is still a matrix every token passes through.
  EXPECT_EQ(ActiveParameters(Small(true)), 5520);
}

// Layer 0 dense, layer 1 MoE with 8 experts of width 6, top-2, one shared:
// router 8 x 16 = 128, shared + 2 routed = 3 x (3 x 16 x 6) = 864, so layer
// 1's MLP counts 992 in place of 1152: 5520 - 1152 + 992 = 5360.
TEST(FlopsTest, MoeLayersCountTheRouterSharedAndChosenExperts) {
  ModelConfig c = Small(false);
  MoeConfig* moe = c.mutable_moe();
  moe->set_n_routed_experts(8);
  moe->set_num_experts_per_tok(2);
  moe->set_n_shared_experts(1);
  moe->set_moe_intermediate_size(6);
  moe->set_first_k_dense_replace(1);
  EXPECT_EQ(ActiveParameters(c), 5360);
}

// With every layer dense (first_k_dense_replace = layers) the expert sizes,
// however large (ValidateConfig bounds only the parameters a model holds),
// count nothing and form no product (it overflowed int64: UBSan).
TEST(FlopsTest, ExpertSizesOfAModelWithoutMoeLayersCountNothing) {
  ModelConfig c = Small(false);
  MoeConfig* moe = c.mutable_moe();
  moe->set_n_routed_experts(2147483647);
  moe->set_num_experts_per_tok(2147483647);
  moe->set_n_shared_experts(2147483647);
  moe->set_moe_intermediate_size(2147483647);
  moe->set_first_k_dense_replace(2);
  EXPECT_EQ(ActiveParameters(c), 5520);
}

TEST(FlopsTest, TrainingFlopsFollowTheMetricsContract) {
  // 6 x 5520 + 6 x layers 2 x seq 8 x (heads 4 x head_dim 4) = 33120 + 1536.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(Small(false), 8), 34656.0);
}

}  // namespace
}  // namespace tetra
