// Named parameters with their gradients, and their initialisation as a pure
// function of (seed, parameter name, element index): a shard of a parameter
// can draw exactly its slice of the global tensor, so every layout starts from
// the same global weights.
#ifndef TETRA_MODEL_PARAMETERS_H_
#define TETRA_MODEL_PARAMETERS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace tetra {

struct Parameter {
  std::string name;   // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Tensor value;
  Tensor grad;        // same shape; accumulated over micro-batches
  bool weight_decay;  // AdamW decay: matrices yes, norm weights no
};

enum class Init { kOnes, kNormal };

class ParameterStore {
 public:
  // Adds a parameter initialised per `init`: kNormal draws N(0, std^2) element
  // i from Philox(seed, stream = StableHash(name), counter = i).
  Parameter& Add(std::string name, const Shape& shape, Init init, double std = 0.0);

  // In registration order; a deque keeps references stable as parameters are added.
  std::deque<Parameter>& all() { return parameters_; }
  const std::deque<Parameter>& all() const { return parameters_; }
  Parameter* Find(std::string_view name);
  void ZeroGrads();
  int64_t NumElements() const;

  explicit ParameterStore(uint64_t seed) : seed_(seed) {}

 private:
  uint64_t seed_;
  std::deque<Parameter> parameters_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_PARAMETERS_H_
