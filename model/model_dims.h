// Derived sizes of a ModelConfig, named once so every layer agrees, and how
// they split over the ranks of a tensor-parallel group.
#ifndef TETRA_MODEL_MODEL_DIMS_H_
#define TETRA_MODEL_MODEL_DIMS_H_

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_types.h"
#include "proto/config.pb.h"

namespace tetra {

// num_key_value_heads, with 0 meaning "one per attention head".
inline int KeyValueHeads(const ModelConfig& c) {
  return c.num_key_value_heads() == 0 ? c.num_attention_heads() : c.num_key_value_heads();
}

// head_dim, with 0 meaning hidden_size / num_attention_heads.
inline int HeadDim(const ModelConfig& c) {
  return c.head_dim() > 0 ? c.head_dim() : c.hidden_size() / c.num_attention_heads();
}

// model.rope_scaling as the RoPE table takes it.
inline RopeScaling RotaryScaling(const ModelConfig& c) {
  const RopeScalingConfig& s = c.rope_scaling();
  RopeScaling scaling{
      .factor = s.factor(),
      .original_max_position_embeddings = static_cast<double>(s.original_max_position_embeddings()),
      .low_freq_factor = s.low_freq_factor(),
      .high_freq_factor = s.high_freq_factor(),
      .beta_fast = s.beta_fast(),
      .beta_slow = s.beta_slow(),
      .mscale = s.mscale(),
      .mscale_all_dim = s.mscale_all_dim(),
      .attention_factor = s.attention_factor(),
      .truncate = s.truncate()};
  if (s.rope_type() == "llama3") scaling.type = RopeScaling::Type::kLlama3;
  if (s.rope_type() == "yarn") scaling.type = RopeScaling::Type::kYarn;
  return scaling;
}

// Hugging Face's names of an MoE block's parts: Mixtral's (block_sparse_moe,
// its experts' w1, w3 and w2) or DeepSeek-V3's, GLM-4-MoE's and Qwen3Moe's
// (mlp, gate_proj, up_proj and down_proj).
struct MoeNames {
  const char* block;
  const char* gate;
  const char* up;
  const char* down;
};
inline MoeNames MoeNamesOf(const ModelConfig& c) {
  if (c.hf_architecture() == "MixtralForCausalLM") return {"block_sparse_moe", "w1", "w3", "w2"};
  return {"mlp", "gate_proj", "up_proj", "down_proj"};
}

// DeepSeek-V3's router has a correction bias on its sigmoid scores (a
// buffer the loads move); softmax routers (Mixtral, Qwen3Moe) have none.
inline bool HasCorrectionBias(const MoeConfig& moe) { return moe.scoring_func() == "sigmoid"; }

// Multi-head latent attention (DeepSeek-V3) instead of Llama's attention.
inline bool UsesMla(const ModelConfig& c) { return c.kv_lora_rank() > 0; }
// MLA's query and key head dim: dims without position, then rotary ones.
inline int QkHeadDim(const ModelConfig& c) { return c.qk_nope_head_dim() + c.qk_rope_head_dim(); }

// MLA's softmax scale (Hugging Face DeepseekV3Attention.scaling): 1 /
// sqrt(qk_nope_head_dim + qk_rope_head_dim), times YaRN's mscale^2 where
// rope_scaling asks for it.
inline double MlaSoftmaxScale(const ModelConfig& c) {
  return YarnSoftmaxScaleMultiplier(RotaryScaling(c)) /
         std::sqrt(static_cast<double>(QkHeadDim(c)));
}

// MLA's q_a_layernorm and kv_a_layernorm epsilon: Hugging Face's
// DeepseekV3RMSNorm default and DeepSeek-V3's own, whatever rms_norm_eps is.
constexpr float kMlaLatentNormEps = 1e-6f;

// Init std of the projections that write into the residual stream (o_proj,
// down_proj): scaled by 1/sqrt(2 x layers) as in GPT-2 and Megatron-LM.
inline double OutputProjectionStd(const ModelConfig& c) {
  return c.initializer_range() / std::sqrt(2.0 * c.num_hidden_layers());
}

// The rows of the embedding and LM head under tensor parallelism of size tp:
// vocab_size rounded up to a multiple of make_vocab_size_divisible_by x tp,
// each rank holding an equal slice; rows past vocab_size are padding
// (TensorShard::padded_extent).
inline int64_t PaddedVocabSize(const ModelConfig& c, int tp) {
  const int64_t multiple = int64_t{c.make_vocab_size_divisible_by()} * tp;
  return (c.vocab_size() + multiple - 1) / multiple * multiple;
}

// Under tensor parallelism of size tp (a layout ValidateTensorParallel
// accepts): each rank holds heads / tp query heads, and kv / tp key-value
// heads when kv >= tp, else one key-value head shared by tp / kv ranks (as
// Megatron-LM does), so KeyValueReplicas ranks hold the same one.
inline int LocalQueryHeads(const ModelConfig& c, int tp) { return c.num_attention_heads() / tp; }
inline int KeyValueReplicas(const ModelConfig& c, int tp) {
  return KeyValueHeads(c) >= tp ? 1 : tp / KeyValueHeads(c);
}
inline int LocalKeyValueHeads(const ModelConfig& c, int tp) {
  return KeyValueHeads(c) * KeyValueReplicas(c, tp) / tp;
}

// Whether `config` splits over a tensor-parallel group of `tp` ranks: query
// heads and intermediate size divisible by tp (the vocabulary is padded to
// fit, PaddedVocabSize), key-value heads a multiple or a divisor of tp, and
// under sequence parallelism the `rows_per_micro_batch` token rows
// (micro_batch_size x seq_length) too. A user error, with the numbers and a
// "\nhint: " line, when not.
absl::Status ValidateTensorParallel(const ModelConfig& config, int tp, bool sequence_parallel,
                                    int64_t rows_per_micro_batch);

}  // namespace tetra

#endif  // TETRA_MODEL_MODEL_DIMS_H_
