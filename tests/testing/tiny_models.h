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

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_TINY_MODELS_H_
