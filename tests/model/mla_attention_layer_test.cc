// Multi-head latent attention: the layer's forward against a plain-loop
// recomputation written from Hugging Face's DeepseekV3Attention (q_lora_rank
// on and off, rope_interleave on and off), its gradients against finite
// differences, and its parameters' names and shapes.
#include "model/mla_attention_layer.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/layer_gradient_check.h"

namespace tetra {
namespace {

using testing::RandomTensor;
using testing::RandomVector;

constexpr int64_t kBatch = 2, kSeq = 5, kHidden = 16;

struct Tolerances {
  // The layer in fp32 against the reference in double: a chain of GEMMs,
  // two norms and a softmax over O(1) values, a few fp32 ulps of O(1)
  // results (a wrong rotation, head or scale is off by O(0.1)).
  double reference;
  // Finite differences as tests/model/layers_test.cc: fp32 forwards
  // differenced with h = 1e-2, about 1e-3 relative.
  testing::GradCheckOptions grad;
};
constexpr Tolerances kTol = {.reference = 2e-5,
                             .grad = {.step = 1e-2, .rel_tol = 2e-2, .abs_tol = 2e-4}};

struct Variant {
  int q_lora_rank;
  bool interleave;
};

ModelConfig MlaConfig(const Variant& v) {
  ModelConfig c;
  c.set_hidden_size(kHidden);
  c.set_num_attention_heads(3);
  c.set_kv_lora_rank(6);
  c.set_q_lora_rank(v.q_lora_rank);
  c.set_qk_nope_head_dim(4);
  c.set_qk_rope_head_dim(6);
  c.set_v_head_dim(5);
  c.set_rope_interleave(v.interleave);
  c.set_rope_theta(100.0);       // angles of several radians within 5 positions
  c.set_initializer_range(0.3);  // gradients well above rounding noise
  return c;
}

// Norm weights away from 1, so a norm applied to the wrong tensor shows.
void RandomizeNorms(ParameterStore& store) {
  uint64_t stream = 50;
  for (Parameter& p : store.all()) {
    if (p.name.find("layernorm") == std::string::npos) continue;
    const std::vector<float> w = RandomVector(p.value.numel(), stream++, 0.3f);
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = 1.0f + w[i];
  }
}

// ---- The reference: DeepseekV3Attention's forward in double, plain loops.

using Matrix = std::vector<double>;  // row-major

const float* Weight(ParameterStore& store, const std::string& name) {
  const Parameter* p = store.Find("attn." + name + ".weight");
  EXPECT_NE(p, nullptr) << name;
  return p->value.f32();
}

// y (n, out) = x (n, in) . w (out, in)^T
Matrix Project(const Matrix& x, const float* w, int64_t n, int64_t in, int64_t out) {
  Matrix y(n * out, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

// DeepseekV3RMSNorm over rows of `dim`, eps 1e-6 (its default).
Matrix Norm(const Matrix& x, const float* w, int64_t n, int64_t dim) {
  Matrix y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const double rstd = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = w[i] * x[r * dim + i] * rstd;
  }
  return y;
}

// HF's apply_rotary_pos_emb(_interleave) on the R dims at v for position p:
// interleaved dims are first reordered (view(R/2, 2).transpose), then
// x * cos + rotate_half(x) * sin with cos, sin = cat(freqs, freqs).
void Rotate(double* v, int64_t pos, int64_t rope, double theta, bool interleave) {
  std::vector<double> x(v, v + rope);
  const int64_t half = rope / 2;
  if (interleave) {
    for (int64_t i = 0; i < half; ++i) {
      x[i] = v[2 * i];
      x[half + i] = v[2 * i + 1];
    }
  }
  for (int64_t j = 0; j < rope; ++j) {
    const int64_t i = j % half;
    const double angle = pos / std::pow(theta, 2.0 * i / rope);
    const double rotated_half = j < half ? -x[j + half] : x[j - half];
    v[j] = x[j] * std::cos(angle) + rotated_half * std::sin(angle);
  }
}

Matrix ReferenceForward(ParameterStore& store, const ModelConfig& c, const Tensor& x_tensor) {
  const int64_t n = kBatch * kSeq, H = c.num_attention_heads(), Dn = c.qk_nope_head_dim(),
                R = c.qk_rope_head_dim(), Dv = c.v_head_dim(), L = c.kv_lora_rank(),
                Rq = c.q_lora_rank(), Dqk = Dn + R;
  const Matrix x(x_tensor.f32(), x_tensor.f32() + x_tensor.numel());
  const Matrix q = Rq > 0 ? Project(Norm(Project(x, Weight(store, "q_a_proj"), n, kHidden, Rq),
                                         Weight(store, "q_a_layernorm"), n, Rq),
                                    Weight(store, "q_b_proj"), n, Rq, H * Dqk)
                          : Project(x, Weight(store, "q_proj"), n, kHidden, H * Dqk);
  const Matrix compressed = Project(x, Weight(store, "kv_a_proj_with_mqa"), n, kHidden, L + R);
  Matrix latent(n * L);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < L; ++i) latent[r * L + i] = compressed[r * (L + R) + i];
  const Matrix kv = Project(Norm(latent, Weight(store, "kv_a_layernorm"), n, L),
                            Weight(store, "kv_b_proj"), n, L, H * (Dn + Dv));
  // query[r][h] = [q_nope | rot(q_pe)], key[r][h] = [k_nope | rot(k_pe)].
  Matrix query(n * H * Dqk), key(n * H * Dqk), value(n * H * Dv);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pos = r % kSeq;
    std::vector<double> k_pe(compressed.begin() + r * (L + R) + L,
                             compressed.begin() + (r + 1) * (L + R));
    Rotate(k_pe.data(), pos, R, c.rope_theta(), c.rope_interleave());
    for (int64_t h = 0; h < H; ++h) {
      double* qh = &query[(r * H + h) * Dqk];
      double* kh = &key[(r * H + h) * Dqk];
      for (int64_t j = 0; j < Dqk; ++j) qh[j] = q[(r * H + h) * Dqk + j];
      Rotate(qh + Dn, pos, R, c.rope_theta(), c.rope_interleave());
      for (int64_t j = 0; j < Dn; ++j) kh[j] = kv[(r * H + h) * (Dn + Dv) + j];
      for (int64_t j = 0; j < R; ++j) kh[Dn + j] = k_pe[j];
      for (int64_t j = 0; j < Dv; ++j)
        value[(r * H + h) * Dv + j] = kv[(r * H + h) * (Dn + Dv) + Dn + j];
    }
  }
  // Causal softmax(q k^T / sqrt(Dqk)) v per sequence and head, then o_proj.
  Matrix attn(n * H * Dv, 0.0);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < kSeq; ++t) {
        std::vector<double> p(t + 1);
        double max = -1e300, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t j = 0; j < Dqk; ++j) {
            dot +=
                query[((b * kSeq + t) * H + h) * Dqk + j] * key[((b * kSeq + s) * H + h) * Dqk + j];
          }
          p[s] = dot / std::sqrt(static_cast<double>(Dqk));
          max = std::max(max, p[s]);
        }
        for (double& e : p) sum += (e = std::exp(e - max));
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t j = 0; j < Dv; ++j) {
            attn[((b * kSeq + t) * H + h) * Dv + j] +=
                p[s] / sum * value[((b * kSeq + s) * H + h) * Dv + j];
          }
        }
      }
    }
  }
  return Project(attn, Weight(store, "o_proj"), n, H * Dv, kHidden);
}

class MlaAttentionLayerTest : public ::testing::TestWithParam<Variant> {};

TEST_P(MlaAttentionLayerTest, ForwardMatchesHuggingFaceSemantics) {
  const ModelConfig c = MlaConfig(GetParam());
  ParameterStore store(1);
  MlaAttentionLayer layer(store, "attn", c);
  RandomizeNorms(store);
  const Tensor x = RandomTensor({kBatch * kSeq, kHidden}, 100);
  const Tensor y = layer.Forward(0, x, kBatch, kSeq);
  const Matrix expected = ReferenceForward(store, c, x);
  ASSERT_EQ(y.numel(), static_cast<int64_t>(expected.size()));
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_NEAR(y.f32()[i], expected[i], kTol.reference * (1.0 + std::fabs(expected[i]))) << i;
  }
}

TEST_P(MlaAttentionLayerTest, GradientsMatchFiniteDifferences) {
  ParameterStore store(1);
  MlaAttentionLayer layer(store, "attn", MlaConfig(GetParam()));
  RandomizeNorms(store);
  testing::ExpectLayerGradients(
      layer, store, {kBatch * kSeq, kHidden},
      [&](const Tensor& x) { return layer.Forward(0, x, kBatch, kSeq); }, kTol.grad);
}

INSTANTIATE_TEST_SUITE_P(Variants, MlaAttentionLayerTest,
                         ::testing::Values(Variant{7, true}, Variant{7, false}, Variant{0, true},
                                           Variant{0, false}),
                         [](const auto& info) {
                           return std::string(info.param.q_lora_rank > 0 ? "QueryLatent"
                                                                         : "QueryProj") +
                                  (info.param.interleave ? "Interleaved" : "RotateHalf");
                         });

TEST(MlaAttentionLayerTest, HasDeepSeekV3ParameterNamesAndShapes) {
  ParameterStore store(1);
  MlaAttentionLayer layer(store, "attn", MlaConfig({7, true}));
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const Parameter& p : store.all()) {
    names.push_back(p.name);
    shapes.push_back(p.global_shape);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "attn.q_a_proj.weight", "attn.q_a_layernorm.weight", "attn.q_b_proj.weight",
                       "attn.kv_a_proj_with_mqa.weight", "attn.kv_a_layernorm.weight",
                       "attn.kv_b_proj.weight", "attn.o_proj.weight"}));
  // H 3, C 16, q_lora 7, kv_lora 6, Dn 4, R 6, Dv 5.
  EXPECT_EQ(shapes, (std::vector<Shape>{
                        {7, 16}, {7}, {3 * 10, 7}, {6 + 6, 16}, {6}, {3 * 9, 6}, {16, 3 * 5}}));
}

}  // namespace
}  // namespace tetra
