// The RoPE tables (kernels/rotary_tables.h): Hugging Face's frequencies,
// their Llama 3.1 and YaRN scalings, and the fp32 cos and sin.
#include "kernels/rotary_tables.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tetra {

namespace {

// transformers' _compute_llama3_parameters, in fp32 as it runs there (a
// Python number over a tensor is the tensor's reciprocal times the number).
void ScaleLlama3(const RopeScaling& s, std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_freq_wavelen =
      static_cast<float>(s.original_max_position_embeddings / s.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(s.original_max_position_embeddings / s.high_freq_factor);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * static_cast<float>(2 * M_PI);
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (wavelen >= high_freq_wavelen) {
      const float smooth = ((1.0f / wavelen) * old_context - low) / band;
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
}

// YaRN's magnitude correction (DeepSeek-V3's yarn_get_mscale), in double as
// Python computes it.
[[gnu::optimize("fp-contract=off")]] double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// transformers' _compute_yarn_parameters: the Python scalars (the ramp's
// ends, the attention factor) in double, the tensors in fp32 with every
// product and sum rounded on its own as torch's separate ops round them (so
// never contracted into an FMA). pos_freq[i] = theta^(2i / dim) in fp32,
// inv_freq its reciprocals, scaled in place. Returns the attention factor.
[[gnu::optimize("fp-contract=off")]] double ScaleYarn(const RopeScaling& s, int64_t dim,
                                                      double theta,
                                                      const std::vector<float>& pos_freq,
                                                      std::vector<float>& inv_freq) {
  const double factor = s.factor;
  const double original = s.original_max_position_embeddings;
  // The dim whose frequency turns `rotations` times over the original context.
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // no zero-width ramp
  const float ramp_start = static_cast<float>(low), ramp_width = static_cast<float>(high - low);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float extrapolation = inv_freq[i];
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq[i]);
    const float ramp = std::clamp((static_cast<float>(i) - ramp_start) / ramp_width, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the extrapolated (unscaled) frequency
    inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  if (s.attention_factor != 0) return s.attention_factor;
  if (s.mscale != 0 && s.mscale_all_dim != 0)
    return YarnMscale(factor, s.mscale) / YarnMscale(factor, s.mscale_all_dim);
  return YarnMscale(factor, 1);
}

}  // namespace

double YarnSoftmaxScaleMultiplier(const RopeScaling& scaling) {
  if (scaling.type != RopeScaling::Type::kYarn || scaling.mscale_all_dim == 0) return 1;
  const double mscale = YarnMscale(scaling.factor, scaling.mscale_all_dim);
  return mscale * mscale;
}

RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta, const RopeScaling& scaling) {
  TETRA_CHECK(seq >= 0 && head_dim > 0 && head_dim % 2 == 0)
      << "seq " << seq << " head_dim " << head_dim;
  const int64_t half_dim = head_dim / 2;
  RopeTable table{.seq = seq,
                  .half_dim = half_dim,
                  .cos = Tensor::Empty({seq, half_dim}),
                  .sin = Tensor::Empty({seq, half_dim})};
  std::vector<float> pos_freq(half_dim), inv_freq(half_dim);
  for (int64_t i = 0; i < half_dim; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    pos_freq[i] = std::pow(static_cast<float>(theta), exponent);
    inv_freq[i] = 1.0f / pos_freq[i];
  }
  double attention_factor = 1;
  if (scaling.type == RopeScaling::Type::kLlama3) ScaleLlama3(scaling, inv_freq);
  if (scaling.type == RopeScaling::Type::kYarn) {
    attention_factor = ScaleYarn(scaling, head_dim, theta, pos_freq, inv_freq);
  }
  // transformers multiplies the fp32 cos and sin by the factor, cast to fp32.
  const float magnitude = static_cast<float>(attention_factor);
  float* cos = table.cos.f32();
  float* sin = table.sin.f32();
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      cos[p * half_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * magnitude;
      sin[p * half_dim + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * magnitude;
    }
  }
  return table;
}

}  // namespace tetra
