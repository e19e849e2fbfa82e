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

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_TINY_MODELS_H_
