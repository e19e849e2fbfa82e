// Derived sizes of a ModelConfig, named once so every layer agrees.
#ifndef TETRA_MODEL_MODEL_DIMS_H_
#define TETRA_MODEL_MODEL_DIMS_H_

#include <cmath>

#include "proto/config.pb.h"

namespace tetra {

// num_key_value_heads, with 0 meaning "one per attention head".
inline int KeyValueHeads(const ModelConfig& c) {
  return c.num_key_value_heads() == 0 ? c.num_attention_heads() : c.num_key_value_heads();
}

inline int HeadDim(const ModelConfig& c) { return c.hidden_size() / c.num_attention_heads(); }

// Init std of the projections that write into the residual stream (o_proj,
// down_proj): scaled by 1/sqrt(2 x layers) as in GPT-2 and Megatron-LM.
inline double OutputProjectionStd(const ModelConfig& c) {
  return c.initializer_range() / std::sqrt(2.0 * c.num_hidden_layers());
}

}  // namespace tetra

#endif  // TETRA_MODEL_MODEL_DIMS_H_
