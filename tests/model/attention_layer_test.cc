// The attention layer's two projection paths (and Qwen's biases and head
// norms, which take the second): with the parameters packed
// (ParameterStore::Pack) so that q, k and v's slices lie back to back, one
// fused GEMM split by SplitQkvRope; unpacked, or with alignment padding
// between the slots, three GEMMs and Rope. Each against the other and
// against finite differences.
#include "model/attention_layer.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/layer_gradient_check.h"

namespace tetra {
namespace {

using testing::RandomTensor;

constexpr int64_t kBatch = 2, kSeq = 5;

struct Tolerances {
  // Fused against three GEMMs: the same products of O(1) values, dx's summed
  // over q, k and v's outputs in one GEMM instead of three accumulations, so
  // a few fp32 ulps apart (a wrong head or rotation is off by O(0.1)).
  double paths;
  // Finite differences as tests/model/layers_test.cc's layer checks: fp32
  // forwards differenced with h = 1e-2, about 1e-3 relative.
  testing::GradCheckOptions grad;
};
constexpr Tolerances kTol = {.paths = 1e-5,
                             .grad = {.step = 1e-2, .rel_tol = 2e-2, .abs_tol = 2e-4}};

ModelConfig Config(int hidden, int heads, int kv_heads) {
  ModelConfig c;
  c.set_hidden_size(hidden);
  c.set_num_attention_heads(heads);
  c.set_num_key_value_heads(kv_heads);
  c.set_initializer_range(0.3);  // gradients well above rounding noise
  return c;
}
// Head dim 4: q (16, 16) and k, v (8, 16) fill whole 16-float slots.
ModelConfig BackToBackConfig() { return Config(16, 4, 2); }
// Head dim 6: k (6, 12) is 72 floats, so Pack() pads 8 after it, before v.
ModelConfig PaddedConfig() { return Config(12, 2, 1); }

// Whether the layer takes the fused path: q, k and v's slots back to back.
bool QkvStacked(ParameterStore& store) {
  return store
      .Stacked({store.Find("attn.q_proj.weight"), store.Find("attn.k_proj.weight"),
                store.Find("attn.v_proj.weight")})
      .has_value();
}

// One forward and backward of fixed inputs in slot 0.
struct Run {
  Tensor y, dx;
  std::vector<Tensor> grads;  // in registration order
};

Run ForwardBackward(AttentionLayer& layer, ParameterStore& store, int64_t hidden) {
  const Tensor x = RandomTensor({kBatch * kSeq, hidden}, 100);
  const Tensor dy = RandomTensor({kBatch * kSeq, hidden}, 200);
  store.ZeroGrads();
  Run run{layer.Forward(0, x, kBatch, kSeq).Clone(), Tensor(), {}};
  run.dx = layer.Backward(0, dy).Clone();
  for (const Parameter& p : store.all()) run.grads.push_back(p.grad.Clone());
  return run;
}

void ExpectNear(const Tensor& got, const Tensor& want, double tol, const std::string& name) {
  ASSERT_EQ(got.shape(), want.shape()) << name;
  for (int64_t i = 0; i < got.numel(); ++i) {
    ASSERT_NEAR(got.f32()[i], want.f32()[i], tol) << name << " element " << i;
  }
}

// `packed` against `separate` (same config and seed, never packed).
void ExpectSameLayer(const Run& packed, const Run& separate, double tol) {
  ExpectNear(packed.y, separate.y, tol, "y");
  ExpectNear(packed.dx, separate.dx, tol, "dx");
  ASSERT_EQ(packed.grads.size(), separate.grads.size());
  for (size_t i = 0; i < packed.grads.size(); ++i) {
    ExpectNear(packed.grads[i], separate.grads[i], tol, "gradient " + std::to_string(i));
  }
}

TEST(AttentionLayerTest, FusedProjectionMatchesThreeProjections) {
  const ModelConfig c = BackToBackConfig();
  ParameterStore packed_store(7), separate_store(7);
  AttentionLayer packed(packed_store, "attn", c), separate(separate_store, "attn", c);
  packed_store.Pack();
  ASSERT_TRUE(QkvStacked(packed_store)) << "the fused path is not taken";
  ExpectSameLayer(ForwardBackward(packed, packed_store, c.hidden_size()),
                  ForwardBackward(separate, separate_store, c.hidden_size()), kTol.paths);
}

TEST(AttentionLayerTest, FusedProjectionMatchesFiniteDifferences) {
  const ModelConfig c = BackToBackConfig();
  ParameterStore store(3);
  AttentionLayer layer(store, "attn", c);
  store.Pack();
  ASSERT_TRUE(QkvStacked(store));
  testing::ExpectLayerGradients(
      layer, store, {kBatch * kSeq, c.hidden_size()},
      [&](const Tensor& x) { return layer.Forward(0, x, kBatch, kSeq); }, kTol.grad);
}

// Padding between k and v: the three projections run, so packing changes
// nothing, bit for bit.
TEST(AttentionLayerTest, PaddedSlotsKeepThreeProjections) {
  const ModelConfig c = PaddedConfig();
  ParameterStore packed_store(7), separate_store(7);
  AttentionLayer packed(packed_store, "attn", c), separate(separate_store, "attn", c);
  packed_store.Pack();
  ASSERT_FALSE(QkvStacked(packed_store));
  ExpectSameLayer(ForwardBackward(packed, packed_store, c.hidden_size()),
                  ForwardBackward(separate, separate_store, c.hidden_size()), /*tol=*/0);
}

// Qwen2's q/k/v biases and Qwen3's q/k head norms (head_dim 6, not 16 / 4):
// every weight, bias and norm weight against finite differences, packed
// (they take the three projections' path).
TEST(AttentionLayerTest, QwenBiasesAndHeadNormsMatchFiniteDifferences) {
  for (const bool qwen3 : {false, true}) {
    ModelConfig c = BackToBackConfig();
    c.set_qkv_bias(!qwen3);
    c.set_qk_norm(qwen3);
    if (qwen3) c.set_head_dim(6);
    ParameterStore store(5);
    AttentionLayer layer(store, "attn", c);
    store.Pack();
    ASSERT_NE(store.Find(qwen3 ? "attn.q_norm.weight" : "attn.q_proj.bias"), nullptr);
    if (qwen3) {
      EXPECT_EQ(store.Find("attn.q_proj.weight")->global_shape, (Shape{24, 16}));
    }
    SCOPED_TRACE(qwen3 ? "qwen3" : "qwen2");
    testing::ExpectLayerGradients(
        layer, store, {kBatch * kSeq, c.hidden_size()},
        [&](const Tensor& x) { return layer.Forward(0, x, kBatch, kSeq); }, kTol.grad);
  }
}

}  // namespace
}  // namespace tetra
