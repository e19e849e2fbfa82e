#include "observe/flops.h"

#include "model/model_dims.h"

namespace tetra {

int64_t ActiveParameters(const ModelConfig& m) {
  const int64_t c = m.hidden_size(), q = int64_t{m.num_attention_heads()} * HeadDim(m),
                kv = int64_t{KeyValueHeads(m)} * HeadDim(m);
  const int64_t attention = c * q + 2 * c * kv + q * c;
  const int64_t dense_mlp = 3 * c * m.intermediate_size();
  const int64_t norms = 2 * c;
  // An MoE layer: the router, the shared experts and the k routed experts a token visits.
  const MoeConfig& moe = m.moe();
  const int moe_layers = moe.n_routed_experts() > 0
                             ? m.num_hidden_layers() - moe.first_k_dense_replace() : 0;
  // Formed only for a model with MoE layers, whose sizes ValidateConfig bounds.
  const int64_t moe_mlp =
      moe_layers == 0 ? 0
                      : int64_t{moe.n_routed_experts()} * c + 3 * c * moe.moe_intermediate_size() *
                                                                  (int64_t{moe.n_shared_experts()} + moe.num_experts_per_tok());
  return m.num_hidden_layers() * (attention + norms) +
         (m.num_hidden_layers() - moe_layers) * dense_mlp + moe_layers * moe_mlp +
         c /*final norm*/ + int64_t{m.vocab_size()} * c /*LM head*/;
}

double TrainingFlopsPerToken(const ModelConfig& m, int64_t seq_length) {
  return 6.0 * ActiveParameters(m) + 6.0 * m.num_hidden_layers() * seq_length *
                                         (double{1.0} * m.num_attention_heads() * HeadDim(m));
}

}  // namespace tetra
