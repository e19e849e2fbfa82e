// The backward split into B (input gradients) and W (weight gradients), as
// the zero-bubble schedules run it (LanguageModel::BackwardInputStage and
// BackwardWeightStage), against the fused BackwardStage: two identical
// models run the same forwards of two micro-batches; one runs each fused
// backward, the other both B's first and then both W's, the order in which a
// schedule defers them. Every parameter's gradient, every d hidden_in a stage
// hands back and the readiness offsets must be bit-identical: the halves are
// the same ops on the same numbers. The deferral makes a layer's scratch
// (output gradients, recomputed activations) be overwritten by the second
// B before the first W reads it, so a W that reads scratch instead of a kept
// copy fails here.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/testing/tiny_models.h"

namespace tetra {
namespace {

constexpr int64_t kBatch = 2, kSeq = 6;
constexpr int kMicroBatches = 2;
constexpr uint64_t kSeed = 77;

std::vector<int32_t> Tokens(const ModelConfig& c, int mb, int offset) {
  std::vector<int32_t> t(kBatch * kSeq);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int32_t>((5 * i + 3 * mb + offset) % c.vocab_size());
  return t;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.numel() * DTypeSize(a.dtype())) == 0;
}

enum class Recompute { kNone, kSelective };

// One chunk of `config` (the whole model by default) run both ways.
void CheckSplitMatchesFused(const ModelConfig& config, Recompute recompute = Recompute::kNone,
                            std::optional<PipelineStage> stage = std::nullopt) {
  ModelParallelism parallelism;
  if (stage) parallelism.chunks = {*stage};
  LanguageModel fused(config, kSeed, parallelism), split(config, kSeed, parallelism);
  if (recompute == Recompute::kSelective) {
    fused.set_selective_recompute();
    split.set_selective_recompute();
  }
  const PipelineStage& chunk = fused.chunk(0);
  const int64_t rows = kBatch * kSeq, hidden = config.hidden_size();
  const float grad_scale = 1.0f / (kMicroBatches * rows);
  std::vector<Tensor> hidden_in(kMicroBatches), d_out(kMicroBatches);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    if (!chunk.has_embedding) {
      hidden_in[mb] = Tensor::Empty({rows, hidden});
      for (int64_t i = 0; i < hidden_in[mb].numel(); ++i)
        hidden_in[mb].f32()[i] = 0.1f * ((i * 7 + mb) % 13) - 0.6f;
    }
    if (!chunk.has_head) {
      d_out[mb] = Tensor::Empty({rows, hidden});
      for (int64_t i = 0; i < d_out[mb].numel(); ++i)
        d_out[mb].f32()[i] = 0.01f * ((i * 5 + mb) % 11) - 0.05f;
    }
  }
  for (LanguageModel* model : {&fused, &split}) {
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      const std::vector<int32_t> inputs = Tokens(config, mb, 0), targets = Tokens(config, mb, 1);
      double loss = 0;
      model->ForwardStage(mb, 0, inputs.data(), hidden_in[mb], targets.data(), kBatch, kSeq,
                          grad_scale, &loss);
    }
  }
  std::vector<std::vector<int64_t>> fused_ready(kMicroBatches), split_ready(kMicroBatches);
  std::vector<Tensor> fused_d(kMicroBatches), split_d(kMicroBatches);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    const Tensor d =
        fused.BackwardStage(mb, 0, d_out[mb], [&](int64_t x) { fused_ready[mb].push_back(x); });
    if (d.defined()) fused_d[mb] = d.Clone();
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    const Tensor d = split.BackwardInputStage(mb, 0, d_out[mb]);
    if (d.defined()) split_d[mb] = d.Clone();
  }
  // B alone leaves every weight gradient untouched.
  for (const Parameter& p : split.parameters().all()) {
    if (!p.trainable) continue;
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      ASSERT_EQ(p.grad.f32()[i], 0.0f) << p.name << " after B";
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    split.BackwardWeightStage(mb, 0, [&](int64_t x) { split_ready[mb].push_back(x); });
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    EXPECT_EQ(fused_d[mb].defined(), !chunk.has_embedding);
    if (fused_d[mb].defined()) {
      EXPECT_TRUE(SameBits(split_d[mb], fused_d[mb])) << "d hidden_in of micro-batch " << mb;
    }
    EXPECT_EQ(split_ready[mb], fused_ready[mb]) << "readiness offsets of micro-batch " << mb;
  }
  int compared = 0;
  for (const Parameter& p : fused.parameters().all()) {
    if (!p.trainable) continue;
    const Parameter* q = split.parameters().Find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    bool nonzero = false;
    for (int64_t i = 0; i < p.grad.numel(); ++i) nonzero |= p.grad.f32()[i] != 0.0f;
    EXPECT_TRUE(nonzero) << p.name << " has no gradient: the comparison would prove nothing";
    EXPECT_TRUE(SameBits(q->grad, p.grad)) << p.name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST(SplitBackwardTest, DenseModel) {
  CheckSplitMatchesFused(testing::TinyGqaConfig(/*tie_word_embeddings=*/false));
}

TEST(SplitBackwardTest, TiedEmbeddingsAndMultiTokenPrediction) {
  ModelConfig c = testing::TinyGqaConfig(/*tie_word_embeddings=*/true);
  c.set_num_nextn_predict_layers(1);
  CheckSplitMatchesFused(c);
}

TEST(SplitBackwardTest, MlaAndMixtureOfExperts) {
  ModelConfig c =
      testing::WithTinyMoe(testing::TinyMlaConfig(/*tie_word_embeddings=*/false, /*q_lora_rank=*/6),
                           /*aux_loss_alpha=*/0.1);
  CheckSplitMatchesFused(c);
}

TEST(SplitBackwardTest, SelectiveRecompute) {
  CheckSplitMatchesFused(testing::TinyGqaConfig(false), Recompute::kSelective);
  CheckSplitMatchesFused(testing::WithTinyMoe(testing::TinyGqaConfig(false), 0.1),
                         Recompute::kSelective);
}

// A middle pipeline stage: its B hands back d hidden_in, which must not wait for W.
TEST(SplitBackwardTest, MiddleStage) {
  ModelConfig c = testing::TinyGqaConfig(false, /*layers=*/3);
  CheckSplitMatchesFused(
      c, Recompute::kNone,
      PipelineStage{.first_layer = 1, .num_layers = 1, .has_embedding = false, .has_head = false});
  CheckSplitMatchesFused(
      c, Recompute::kNone,
      PipelineStage{.first_layer = 1, .num_layers = 2, .has_embedding = false, .has_head = true});
}

TEST(SplitBackwardTest, Bf16) {
  const ScopedPlacement bf16({DeviceType::kCPU, DType::kBF16});
  CheckSplitMatchesFused(testing::TinyGqaConfig(false));
}

TEST(SplitBackwardDeathTest, ForwardIntoASlotAwaitingItsWeightGradients) {
  const ModelConfig c = testing::TinyGqaConfig(false);
  LanguageModel model(c, kSeed);
  const std::vector<int32_t> inputs = Tokens(c, 0, 0), targets = Tokens(c, 0, 1);
  double loss = 0;
  model.ForwardStage(0, 0, inputs.data(), Tensor(), targets.data(), kBatch, kSeq, 1.0f, &loss);
  model.BackwardInputStage(0, 0, Tensor());
  EXPECT_DEATH(
      model.ForwardStage(0, 0, inputs.data(), Tensor(), targets.data(), kBatch, kSeq, 1.0f, &loss),
      "before the backward of its last forward");
  EXPECT_DEATH(model.BackwardWeightStage(0, 1), "without the input-gradient half");
}

}  // namespace
}  // namespace tetra
