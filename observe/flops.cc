#include "observe/flops.h"

#include <algorithm>

#include "model/model_dims.h"

namespace tetra {

ParameterCounts CountParameters(const ModelConfig& m) {
  ParameterCounts p;
  const double c = m.hidden_size(), q = double{1.0} * m.num_attention_heads() * HeadDim(m),
               kv = double{1.0} * KeyValueHeads(m) * HeadDim(m);
  p.layers = m.num_hidden_layers();
  const MoeConfig& moe = m.moe();
  // Sizes ValidateConfig bounds; MoE layers follow the first first_k_dense_replace.
  p.moe_layers = moe.n_routed_experts() > 0 ? std::max(0, p.layers - moe.first_k_dense_replace()) : 0;
  p.attention = 2 * c * q + 2 * c * kv;
  p.norms = 2 * c;
  p.dense_mlp = 3 * c * m.intermediate_size();
  if (p.moe_layers > 0) {
    const double expert = 3 * c * moe.moe_intermediate_size();
    p.router = moe.n_routed_experts() * c;
    p.routed_experts = moe.n_routed_experts() * expert;
    p.shared_experts = moe.n_shared_experts() * expert;
    p.active_moe_mlp = p.router + p.shared_experts + moe.num_experts_per_tok() * expert;
  }
  p.embedding = double{1.0} * m.vocab_size() * c;
  p.final_norm = c;
  return p;
}

int64_t ActiveParameters(const ModelConfig& m) {
  const ParameterCounts p = CountParameters(m);
  return static_cast<int64_t>(p.layers * (p.attention + p.norms) + (p.layers - p.moe_layers) * p.dense_mlp +
                              p.moe_layers * p.active_moe_mlp + p.final_norm + p.embedding /*LM head*/);
}

double TrainingFlopsPerToken(const ModelConfig& m, int64_t seq_length) {
  return 6.0 * ActiveParameters(m) + 6.0 * m.num_hidden_layers() * seq_length *
                                         (double{1.0} * m.num_attention_heads() * HeadDim(m));
}

}  // namespace tetra
