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

// One multi-token prediction depth runs, per token, eh_proj 16 x 32 = 512
// and three norms 48, one more layer 1952 and the LM head 1600: 4112, and
// attention over a third layer: 6 x (5520 + 4112) + 6 x 3 x 8 x 16 = 60096.
// The active parameters stay the main model's.
TEST(FlopsTest, MultiTokenPredictionAddsItsDepthsWork) {
  ModelConfig c = Small(false);
  c.set_num_nextn_predict_layers(1);
  EXPECT_EQ(ActiveParameters(c), 5520);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(c, 8), 60096.0);
}

// DeepSeek-V3's multi-head latent attention, counted by hand from its weight
// shapes (C 7168, H 128, q_lora 1536, kv_lora 512, Dn 128, R 64, Dv 128):
// q_a_proj 7168 x 1536, q_a_layernorm 1536, q_b_proj 1536 x 128 x 192,
// kv_a_proj_with_mqa 7168 x 576, kv_a_layernorm 512, kv_b_proj 512 x 128 x
// 256, o_proj 128 x 128 x 7168.
TEST(FlopsTest, MlaCountsItsProjectionsAndLatentNorms) {
  ModelConfig c;
  c.set_hidden_size(7168);
  c.set_num_attention_heads(128);
  c.set_q_lora_rank(1536);
  c.set_kv_lora_rank(512);
  c.set_qk_nope_head_dim(128);
  c.set_qk_rope_head_dim(64);
  c.set_v_head_dim(128);
  const double attention = 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 +
                           512.0 * 128 * 256 + 128.0 * 128 * 7168;
  EXPECT_DOUBLE_EQ(CountParameters(c).attention, attention);
  // Without q_lora_rank, q_proj 7168 x 128 x 192 instead of the three.
  c.set_q_lora_rank(0);
  EXPECT_DOUBLE_EQ(CountParameters(c).attention,
                   attention - (7168.0 * 1536 + 1536 + 1536.0 * 128 * 192) + 7168.0 * 128 * 192);
  // Attention's term: heads x (scores' 192 + values' 128) / 2 per position.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(c, 8) - 6.0 * ActiveParameters(c),
                   6.0 * c.num_hidden_layers() * 8 * 128 * (192 + 128) / 2);
}

}  // namespace
}  // namespace tetra
