// Rotary position embeddings' tables: the cos and sin of every (position,
// frequency) angle, computed on the host as Hugging Face computes them, with
// Llama 3.1's and YaRN's frequency scalings. The op API's RoPE ops
// (kernels/ops.h) read them.
#ifndef TETRA_KERNELS_ROTARY_TABLES_H_
#define TETRA_KERNELS_ROTARY_TABLES_H_

#include <cstdint>

#include "core/tensor.h"

namespace tetra {

// cos and sin of every (position, frequency) angle of rotary embeddings, fp32
// tensors (seq, half_dim) on the device of the ops that read them.
struct RopeTable {
  int64_t seq = 0;
  int64_t half_dim = 0;
  Tensor cos;  // (seq, half_dim)
  Tensor sin;  // (seq, half_dim)
};

// Scaling of the rotary frequencies for a context `factor` times longer than
// original_max_position_embeddings, as Hugging Face's rope_scaling types
// compute it (proto/config.proto's RopeScalingConfig says what each field
// means).
//  - kLlama3, Llama 3.1's: frequencies whose wavelength exceeds original /
//    low_freq_factor are divided by factor, those below original /
//    high_freq_factor kept, and those between blended smoothly.
//  - kYarn, YaRN's (transformers' _compute_yarn_parameters): frequencies
//    kept above beta_fast turns over the original context, divided by factor
//    below beta_slow turns, a linear ramp over the dims between; cos and sin
//    multiplied by the attention factor.
struct RopeScaling {
  enum class Type { kNone, kLlama3, kYarn };
  Type type = Type::kNone;
  double factor = 1;
  double original_max_position_embeddings = 8192;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 0;            // 0: absent
  double mscale_all_dim = 0;    // 0: absent
  double attention_factor = 0;  // 0: derived from factor, mscale, mscale_all_dim
  bool truncate = true;
};

// What DeepSeek-V3's attention (Hugging Face DeepseekV3Attention) multiplies
// its softmax scale 1 / sqrt(qk_head_dim) by: under YaRN with mscale_all_dim
// set, mscale(factor, mscale_all_dim)^2, mscale(s, m) = 0.1 m ln(s) + 1 (1
// for s <= 1); else 1. Llama's attention never does this.
double YarnSoftmaxScaleMultiplier(const RopeScaling& scaling);

// The table on the host, computed as Hugging Face Llama does in fp32:
// inv_freq[i] = 1 / theta^(float(2i) / head_dim) (then scaled, in fp32 in
// transformers' order of operations), angle = float(p) * inv_freq[i], then
// cos/sin of that fp32 angle, correctly rounded (and for YaRN times the fp32
// attention factor). head_dim is the rotary dims (MLA's qk_rope_head_dim).
RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta,
                        const RopeScaling& scaling = {});

}  // namespace tetra

#endif  // TETRA_KERNELS_ROTARY_TABLES_H_
