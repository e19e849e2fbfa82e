#include "observe/flops.h"

#include <algorithm>

#include "model/model_dims.h"

namespace tetra {
namespace {

// One layer's attention weights: Llama's q, k, v and o projections, or MLA's
// projections and latent norms.
double AttentionParameters(const ModelConfig& m) {
  const double c = m.hidden_size(), heads = m.num_attention_heads();
  if (!UsesMla(m)) {
    const double q = heads * HeadDim(m), kv = double{1.0} * KeyValueHeads(m) * HeadDim(m);
    return 2 * c * q + 2 * c * kv;
  }
  const double q_rank = m.q_lora_rank(), kv_rank = m.kv_lora_rank(), qk = heads * QkHeadDim(m);
  const double query = q_rank > 0 ? c * q_rank + q_rank + q_rank * qk : c * qk;
  return query + c * (kv_rank + m.qk_rope_head_dim()) + kv_rank +
         kv_rank * heads * (m.qk_nope_head_dim() + m.v_head_dim()) + heads * m.v_head_dim() * c;
}

// Per token and key position, the head dims causal attention multiplies
// through, averaged over scores (query/key dims) and values (value dims).
double AttentionWidth(const ModelConfig& m) {
  const double heads = m.num_attention_heads();
  return UsesMla(m) ? heads * (QkHeadDim(m) + m.v_head_dim()) / 2 : heads * HeadDim(m);
}

}  // namespace

ParameterCounts CountParameters(const ModelConfig& m) {
  ParameterCounts p;
  const double c = m.hidden_size();
  p.layers = m.num_hidden_layers();
  const MoeConfig& moe = m.moe();
  // Sizes ValidateConfig bounds; MoE layers follow the first first_k_dense_replace.
  p.moe_layers =
      moe.n_routed_experts() > 0 ? std::max(0, p.layers - moe.first_k_dense_replace()) : 0;
  p.mtp_depths = m.num_nextn_predict_layers();
  p.mtp_moe = moe.n_routed_experts() > 0;
  p.mtp_join = 2 * c * c + 3 * c;
  p.attention = AttentionParameters(m);
  p.norms = 2 * c;
  p.dense_mlp = 3 * c * m.intermediate_size();
  if (p.moe_layers > 0 || (p.mtp_depths > 0 && p.mtp_moe)) {
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
  return static_cast<int64_t>(
      p.layers * (p.attention + p.norms) + (p.layers - p.moe_layers) * p.dense_mlp +
      p.moe_layers * p.active_moe_mlp + p.final_norm + p.embedding /*LM head*/);
}

double TrainingFlopsPerToken(const ModelConfig& m, int64_t seq_length) {
  const ParameterCounts p = CountParameters(m);
  const double depth = p.mtp_join + p.attention + p.norms +
                       (p.mtp_moe ? p.active_moe_mlp : p.dense_mlp) + p.embedding /*LM head*/;
  const double layers = m.num_hidden_layers() + p.mtp_depths;
  return 6.0 * (ActiveParameters(m) + p.mtp_depths * depth) +
         6.0 * layers * seq_length * AttentionWidth(m);
}

}  // namespace tetra
