// Finite-difference gradient checks of every layer (input and weight
// gradients) and of the whole Llama model on tiny dimensions; micro-batches
// in flight in activation slots; the model's parameter names and init; which
// tensor-parallel layouts a config accepts.
// (Tensor-parallel numerics: tests/model/tensor_parallel_layers_mpi_test.cc.)
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/attention_layer.h"
#include "model/decoder_block.h"
#include "model/language_model.h"
#include "model/mlp_layer.h"
#include "model/model_dims.h"
#include "model/rmsnorm_layer.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/layer_gradient_check.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

using testing::ExpectGradientMatches;
using testing::GradCheckOptions;
using testing::RandomTensor;
using testing::RandomVector;

// Tolerances: fp32 forward passes differenced with h = 1e-2; the truncation
// error is O(h^2 f''') and the rounding error O(1e-7 |L| / h), so about 1e-3
// relative on these well-scaled inputs. 2e-2 leaves room without hiding a wrong
// term (a wrong gradient is off by O(1)).
const GradCheckOptions kLayerTolerance{/*step=*/1e-2, /*rel_tol=*/2e-2, /*abs_tol=*/2e-4};
// The whole model stacks many layers: the same bounds, applied to the sum of
// token losses (grad_scale 1), whose gradients are O(1).
const GradCheckOptions kModelTolerance{/*step=*/1e-2, /*rel_tol=*/3e-2, /*abs_tol=*/5e-4};
// The MLP's fused gate/up GEMMs against the separate ones: the same O(1)
// products summed in fp32 in other orders (16 per gate/up output, 48 per
// dx element), a few 1e-7 each.
constexpr double kFusedGateUpTol = 1e-5;

ModelConfig TinyConfig(bool tie) {
  ModelConfig c;
  c.set_vocab_size(11);
  c.set_hidden_size(16);
  c.set_num_hidden_layers(2);
  c.set_num_attention_heads(4);
  c.set_num_key_value_heads(2);  // grouped-query attention on
  c.set_intermediate_size(24);
  c.set_tie_word_embeddings(tie);
  c.set_initializer_range(0.3);  // larger weights give gradients well above rounding noise
  return c;
}

template <typename Layer>
void CheckLayer(Layer& layer, ParameterStore& store, const Shape& x_shape) {
  testing::ExpectLayerGradients(
      layer, store, x_shape, [&](const Tensor& x) { return Tensor(layer.Forward(/*slot=*/0, x)); },
      kLayerTolerance);
}

template <typename Layer>
void CheckSequenceLayer(Layer& layer, ParameterStore& store, int64_t batch, int64_t seq,
                        int64_t dim) {
  testing::ExpectLayerGradients(
      layer, store, {batch, seq, dim},
      [&](const Tensor& x) { return Tensor(layer.Forward(/*slot=*/0, x, batch, seq)); },
      kLayerTolerance);
}

TEST(LayerGradientTest, RmsNorm) {
  ParameterStore store(1);
  RmsNormLayer layer(store, "norm.weight", 16, 1e-5f);
  // Non-trivial weights so the weight gradient path is exercised.
  std::vector<float> w = RandomVector(16, 3);
  std::memcpy(store.all()[0].value.raw(), w.data(), 16 * sizeof(float));
  CheckLayer(layer, store, {3, 16});
}

TEST(LayerGradientTest, Attention) {
  ParameterStore store(1);
  AttentionLayer layer(store, "attn", TinyConfig(false));
  CheckSequenceLayer(layer, store, 2, 5, 16);
}

TEST(LayerGradientTest, Mlp) {
  ParameterStore store(1);
  MlpLayer layer(store, "mlp", TinyConfig(false));
  CheckLayer(layer, store, {2, 5, 16});
}

// Whether the MlpLayer "mlp" of `store` runs gate and up as one GEMM.
bool GateUpStacked(ParameterStore& store) {
  return store.Stacked({store.Find("mlp.gate_proj.weight"), store.Find("mlp.up_proj.weight")})
      .has_value();
}

// After Pack() gate and up (24 x 16 each: whole 64-byte slots) sit back to
// back: the fused gate/up GEMM, packed SwiGLU and one backward GEMM.
TEST(LayerGradientTest, MlpWithFusedGateUp) {
  ParameterStore store(1);
  MlpLayer layer(store, "mlp", TinyConfig(false));
  store.Pack();
  ASSERT_TRUE(GateUpStacked(store));
  CheckLayer(layer, store, {2, 5, 16});
}

// Gate and up of 6 x 10: 60 floats, padded to 64, so the two GEMMs stay.
TEST(LayerGradientTest, MlpWithPaddingBetweenGateAndUp) {
  ModelConfig c = TinyConfig(false);
  c.set_hidden_size(10);
  c.set_intermediate_size(6);
  ParameterStore store(1);
  MlpLayer layer(store, "mlp", c);
  store.Pack();
  ASSERT_FALSE(GateUpStacked(store));
  CheckLayer(layer, store, {2, 5, 10});
}

// The fused path computes what the separate GEMMs do, up to the order of
// fp32 sums: dx sums over gate's and up's features in one GEMM.
TEST(MlpLayerTest, FusedGateUpMatchesSeparateGemms) {
  ParameterStore separate_store(1), fused_store(1);
  MlpLayer separate(separate_store, "mlp", TinyConfig(false));
  MlpLayer fused(fused_store, "mlp", TinyConfig(false));
  fused_store.Pack();  // same seed and names: the same initial weights
  const Tensor x = RandomTensor({7, 16}, 1), dy = RandomTensor({7, 16}, 2);
  const Tensor y_separate = separate.Forward(0, x).Clone();
  const Tensor y_fused = fused.Forward(0, x).Clone();
  const Tensor dx_separate = separate.Backward(0, dy).Clone();
  const Tensor dx_fused = fused.Backward(0, dy).Clone();
  const auto expect_near = [&](const std::string& what, const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.numel(), b.numel()) << what;
    for (int64_t i = 0; i < a.numel(); ++i) {
      EXPECT_NEAR(a.f32()[i], b.f32()[i], kFusedGateUpTol) << what << " " << i;
    }
  };
  expect_near("y", y_separate, y_fused);
  expect_near("dx", dx_separate, dx_fused);
  for (const char* name : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
    expect_near(name, separate_store.Find(name)->grad, fused_store.Find(name)->grad);
  }
}

TEST(LayerGradientTest, DecoderBlock) {
  ParameterStore store(1);
  DecoderBlock block(store, 0, TinyConfig(false));
  CheckSequenceLayer(block, store, 2, 5, 16);
}

void CheckModel(bool tie) {
  LanguageModel model(TinyConfig(tie), 5);
  const int64_t batch = 2, seq = 6;
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i) {
    inputs[i] = static_cast<int32_t>((i * 7 + 3) % 11);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % 11);
  }
  model.parameters().ZeroGrads();
  testing::ForwardBackward(model, inputs.data(), targets.data(), batch, seq, 1.0f);
  auto loss = [&] {
    return testing::ForwardLoss(model, inputs.data(), targets.data(), batch, seq);
  };
  for (Parameter& p : model.parameters().all()) {
    Tensor grad = p.grad.Clone();
    ExpectGradientMatches(p.name, p.value.f32(), p.value.numel(), grad.f32(), loss,
                          {kModelTolerance.step, kModelTolerance.rel_tol, kModelTolerance.abs_tol,
                           /*max_checks=*/12});
  }
}

TEST(ModelGradientTest, UntiedHeadWithGroupedQueryAttention) { CheckModel(/*tie=*/false); }
TEST(ModelGradientTest, TiedEmbeddings) { CheckModel(/*tie=*/true); }

TEST(ModelTest, HasHuggingFaceParameterNames) {
  LanguageModel model(TinyConfig(false), 5);
  std::vector<std::string> names;
  for (const Parameter& p : model.parameters().all()) names.push_back(p.name);
  const std::vector<std::string> expected = {"model.embed_tokens.weight",
                                             "model.layers.0.input_layernorm.weight",
                                             "model.layers.0.self_attn.q_proj.weight",
                                             "model.layers.0.self_attn.k_proj.weight",
                                             "model.layers.0.self_attn.v_proj.weight",
                                             "model.layers.0.self_attn.o_proj.weight",
                                             "model.layers.0.post_attention_layernorm.weight",
                                             "model.layers.0.mlp.gate_proj.weight",
                                             "model.layers.0.mlp.up_proj.weight",
                                             "model.layers.0.mlp.down_proj.weight",
                                             "model.layers.1.input_layernorm.weight",
                                             "model.layers.1.self_attn.q_proj.weight",
                                             "model.layers.1.self_attn.k_proj.weight",
                                             "model.layers.1.self_attn.v_proj.weight",
                                             "model.layers.1.self_attn.o_proj.weight",
                                             "model.layers.1.post_attention_layernorm.weight",
                                             "model.layers.1.mlp.gate_proj.weight",
                                             "model.layers.1.mlp.up_proj.weight",
                                             "model.layers.1.mlp.down_proj.weight",
                                             "model.norm.weight",
                                             "lm_head.weight"};
  EXPECT_EQ(names, expected);
  // k_proj is (kv_heads x head_dim, hidden) = (2 x 4, 16).
  EXPECT_EQ(model.parameters().Find("model.layers.0.self_attn.k_proj.weight")->value.shape(),
            (Shape{8, 16}));
}

TEST(ModelTest, InitIsAPureFunctionOfSeedNameAndIndex) {
  ModelConfig c = TinyConfig(false);
  c.set_initializer_range(0.02);
  LanguageModel a(c, 9), b(c, 9);
  ModelConfig deeper = c;
  deeper.set_num_hidden_layers(3);
  LanguageModel d(deeper, 9);
  // Same seed: identical; a deeper model shares the draws of every common
  // matrix except the output projections, whose std depends on the depth.
  const Tensor& qa = a.parameters().Find("model.layers.1.self_attn.q_proj.weight")->value;
  const Tensor& qb = b.parameters().Find("model.layers.1.self_attn.q_proj.weight")->value;
  const Tensor& qd = d.parameters().Find("model.layers.1.self_attn.q_proj.weight")->value;
  EXPECT_EQ(std::memcmp(qa.raw(), qb.raw(), qa.nbytes()), 0);
  EXPECT_EQ(std::memcmp(qa.raw(), qd.raw(), qa.nbytes()), 0);
  // Element i is 0.02 * Normal(seed, hash(name), i).
  CounterRng rng(9, StableHash("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(qa.f32()[37], static_cast<float>(0.02 * rng.Normal(37)));
  // Output projections: std / sqrt(2 L), norms: 1.
  CounterRng orng(9, StableHash("model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(a.parameters().Find("model.layers.0.mlp.down_proj.weight")->value.f32()[5],
            static_cast<float>(0.02 / 2.0 * orng.Normal(5)));
  EXPECT_EQ(a.parameters().Find("model.norm.weight")->value.f32()[3], 1.0f);
}

// A micro-batch of `batch` sequences of `seq` tokens, drawn from `stream`.
struct MicroBatch {
  int64_t batch, seq;
  std::vector<int32_t> inputs, targets;
};

MicroBatch MakeMicroBatch(int64_t batch, int64_t seq, int stream) {
  MicroBatch m{batch, seq, std::vector<int32_t>(batch * seq), std::vector<int32_t>(batch * seq)};
  for (int64_t i = 0; i < batch * seq; ++i) {
    m.inputs[i] = static_cast<int32_t>((i * 7 + 3 * stream) % 11);
    m.targets[i] = static_cast<int32_t>((i * 5 + stream) % 11);
  }
  return m;
}

void ExpectSameGradients(LanguageModel& got, LanguageModel& want) {
  for (const Parameter& p : want.parameters().all()) {
    const Tensor& grad = got.parameters().Find(p.name)->grad;
    EXPECT_EQ(std::memcmp(grad.raw(), p.grad.raw(), grad.nbytes()), 0) << p.name;
  }
}

// 1F1B keeps micro-batches in flight: the forwards of A and B in slots 0 and
// 1, then their backwards, in either order (1F1B's own order is A first).
// Each backward reads only its own slot, so the gradients are bit for bit
// those of testing::ForwardBackward run on one slot in the order of the backwards: the
// same values summed in the same order. A stale or shared activation changes
// them. B's shape differs from A's, so no buffer or RoPE table fits both.
void CheckMicroBatchesInFlight(bool tie, bool backward_a_first) {
  const MicroBatch a = MakeMicroBatch(2, 6, 1), b = MakeMicroBatch(3, 4, 2);
  const float scale_a = 0.25f, scale_b = 0.5f;
  LanguageModel in_flight(TinyConfig(tie), 5), one_by_one(TinyConfig(tie), 5);
  in_flight.parameters().ZeroGrads();
  one_by_one.parameters().ZeroGrads();

  const double loss_a =
      testing::Forward(in_flight, 0, a.inputs.data(), a.targets.data(), a.batch, a.seq, scale_a);
  const double loss_b =
      testing::Forward(in_flight, 1, b.inputs.data(), b.targets.data(), b.batch, b.seq, scale_b);
  EXPECT_EQ(in_flight.num_slots(), 2);
  const std::vector<int> order = backward_a_first ? std::vector<int>{0, 1} : std::vector<int>{1, 0};
  for (int slot : order) {
    testing::Backward(in_flight, slot);
    const MicroBatch& m = slot == 0 ? a : b;
    const double loss = testing::ForwardBackward(one_by_one, m.inputs.data(), m.targets.data(),
                                                 m.batch, m.seq, slot == 0 ? scale_a : scale_b);
    EXPECT_EQ(loss, slot == 0 ? loss_a : loss_b) << "slot " << slot;
  }
  EXPECT_EQ(one_by_one.num_slots(), 1);  // one set of activations, as without slots
  ExpectSameGradients(in_flight, one_by_one);
}

TEST(ModelSlotTest, BackwardsInForwardOrderMatchOneByOne) {
  CheckMicroBatchesInFlight(/*tie=*/false, /*backward_a_first=*/true);
  CheckMicroBatchesInFlight(/*tie=*/true, /*backward_a_first=*/true);
}

TEST(ModelSlotTest, BackwardsInReverseOrderMatchOneByOne) {
  CheckMicroBatchesInFlight(/*tie=*/false, /*backward_a_first=*/false);
  CheckMicroBatchesInFlight(/*tie=*/true, /*backward_a_first=*/false);
}

TEST(ModelSlotTest, ReleasedSlotsAreMadeAgain) {
  LanguageModel model(TinyConfig(false), 5), fresh(TinyConfig(false), 5);
  const MicroBatch m = MakeMicroBatch(2, 3, 1);
  testing::Forward(model, 2, m.inputs.data(), m.targets.data(), m.batch, m.seq, 1.0f);
  testing::Backward(model, 2);
  EXPECT_EQ(model.num_slots(), 3);
  model.ReleaseActivations();
  EXPECT_EQ(model.num_slots(), 0);
  model.parameters().ZeroGrads();
  fresh.parameters().ZeroGrads();
  testing::ForwardBackward(model, m.inputs.data(), m.targets.data(), m.batch, m.seq, 1.0f);
  testing::ForwardBackward(fresh, m.inputs.data(), m.targets.data(), m.batch, m.seq, 1.0f);
  EXPECT_EQ(model.num_slots(), 1);
  ExpectSameGradients(model, fresh);
}

TEST(ModelSlotDeathTest, BackwardNeedsItsOwnForward) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  LanguageModel model(TinyConfig(false), 5);
  const MicroBatch m = MakeMicroBatch(2, 3, 1);
  EXPECT_DEATH(testing::Backward(model, 0), "no forward has filled");
  testing::Forward(model, 0, m.inputs.data(), m.targets.data(), m.batch, m.seq, 1.0f);
  EXPECT_DEATH(testing::Forward(model, 0, m.inputs.data(), m.targets.data(), m.batch, m.seq, 1.0f),
               "before the backward of its last forward");
  testing::Backward(model, 0);
  EXPECT_DEATH(testing::Backward(model, 0), "without a forward with gradients");
  testing::ForwardLoss(model, m.inputs.data(), m.targets.data(), m.batch, m.seq);
  EXPECT_DEATH(testing::Backward(model, 0), "without a forward with gradients");
}

// ValidateTensorParallel: each rule refused with its numbers and a hint line,
// on the 4-head, 2-kv-head config (vocabulary 64, though any vocabulary
// splits: it is padded to a multiple of tp).
ModelConfig DivisibleConfig() {
  ModelConfig c = TinyConfig(false);
  c.set_vocab_size(64);
  return c;
}

void ExpectRefused(const ModelConfig& c, int tp, bool sp, int64_t rows,
                   const std::vector<std::string>& parts) {
  const absl::Status status = ValidateTensorParallel(c, tp, sp, rows);
  ASSERT_FALSE(status.ok()) << "tp " << tp;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_NE(message.find("\nhint: "), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(TensorParallelValidationTest, AcceptsLayoutsThatSplitEvenly) {
  const ModelConfig c = DivisibleConfig();
  EXPECT_TRUE(ValidateTensorParallel(TinyConfig(false), 1, /*sp=*/true, 7).ok());
  EXPECT_TRUE(ValidateTensorParallel(c, 2, /*sp=*/true, 12).ok());
  // kv 2 < tp 4: one kv head shared by 2 ranks.
  EXPECT_TRUE(ValidateTensorParallel(c, 4, /*sp=*/false, 7).ok());
  // Vocabulary 11 at tp 2: padded to 128 x 2 = 256 rows, 128 per rank.
  EXPECT_TRUE(ValidateTensorParallel(TinyConfig(false), 2, /*sp=*/false, 12).ok());
  EXPECT_EQ(PaddedVocabSize(TinyConfig(false), 2), 256);
}

TEST(TensorParallelValidationTest, RefusesUnevenSplits) {
  ModelConfig c = DivisibleConfig();
  ExpectRefused(c, 8, false, 16, {"model.num_attention_heads 4", "parallel.tensor 8"});
  c.set_intermediate_size(26);
  ExpectRefused(c, 4, false, 16, {"model.intermediate_size 26", "e.g. 28"});
  c = DivisibleConfig();
  c.set_num_attention_heads(6);
  c.set_hidden_size(24);
  c.set_num_key_value_heads(3);
  ExpectRefused(c, 2, false, 16, {"model.num_key_value_heads 3", "parallel.tensor 2"});
  ExpectRefused(DivisibleConfig(), 4, /*sp=*/true, 10,
                {"10 token rows", "parallel.tensor 4", "sequence_parallel"});
  ExpectRefused(DivisibleConfig(), 0, false, 16, {"parallel.tensor is 0"});
}

// The gradient-ready callback on one rank: the final norm's offset, each
// block's first offset from the last block down, then 0.
TEST(ModelTest, ReportsGradientsReadyFromTheEndOfTheFlatBuffer) {
  LanguageModel model(TinyConfig(false), 5);
  std::vector<int32_t> tokens(2 * 3, 1);
  std::vector<int64_t> offsets;
  testing::ForwardBackward(model, tokens.data(), tokens.data(), 2, 3, 1.0f,
                           [&](int64_t offset) { offsets.push_back(offset); });
  ParameterStore& p = model.parameters();
  const std::vector<int64_t> expected = {
      p.Find("model.norm.weight")->flat_offset,
      p.Find("model.layers.1.input_layernorm.weight")->flat_offset,
      p.Find("model.layers.0.input_layernorm.weight")->flat_offset, 0};
  EXPECT_EQ(offsets, expected);
}

}  // namespace
}  // namespace tetra
