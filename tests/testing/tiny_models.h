// Tiny model configs shared by the multi-rank equivalence tests, sized so
// every layout divides them: vocab 64, 4 query heads and 2 key-value heads
// (so tp 4 replicates KV heads), intermediate 64, `layers` blocks (a multiple
// of the pipeline stages).
#ifndef TETRA_TESTS_TESTING_TINY_MODELS_H_
#define TETRA_TESTS_TESTING_TINY_MODELS_H_

#include "proto/config.pb.h"

namespace tetra::testing {

inline ModelConfig TinyGqaConfig(bool tie_word_embeddings, int layers = 2) {
  ModelConfig c;
  c.set_vocab_size(64);
  c.set_hidden_size(32);
  c.set_num_hidden_layers(layers);
  c.set_num_attention_heads(4);
  c.set_num_key_value_heads(2);
  c.set_intermediate_size(64);
  c.set_tie_word_embeddings(tie_word_embeddings);
  c.set_initializer_range(0.1);  // gradients well above fp32 round-off
  return c;
}

// The same with DeepSeek-V3's multi-head latent attention: latents of 6
// (keys and values) and q_lora_rank (0: a plain q_proj), head dims 4 + 4
// rotary for queries and keys, 6 for values (unequal, as DeepSeek-V3's).
inline ModelConfig TinyMlaConfig(bool tie_word_embeddings, int q_lora_rank, int layers = 2) {
  ModelConfig c = TinyGqaConfig(tie_word_embeddings, layers);
  c.clear_num_key_value_heads();
  c.set_kv_lora_rank(6);
  c.set_q_lora_rank(q_lora_rank);
  c.set_qk_nope_head_dim(4);
  c.set_qk_rope_head_dim(4);
  c.set_v_head_dim(6);
  return c;
}

// DeepSeek-V3's mixture of experts in small on `c`: a dense first layer,
// then 4 routed experts of width 6 in 2 groups (top-1 group, top-2 experts)
// beside one shared expert, routed_scaling_factor 2, and a balance loss of
// `aux_loss_alpha` (large, so a wrong balance-loss gradient shows).
inline ModelConfig WithTinyMoe(ModelConfig c, double aux_loss_alpha) {
  MoeConfig* moe = c.mutable_moe();
  moe->set_n_routed_experts(4);
  moe->set_num_experts_per_tok(2);
  moe->set_n_shared_experts(1);
  moe->set_moe_intermediate_size(6);
  moe->set_first_k_dense_replace(1);
  moe->set_n_group(2);
  moe->set_topk_group(1);
  moe->set_routed_scaling_factor(2.0);
  moe->set_aux_loss_alpha(aux_loss_alpha);
  return c;
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_TINY_MODELS_H_
