// Multi-token prediction in the whole model: DeepSeek-V3's weight names, and
// the gradient of the objective (main cross-entropy + mtp_loss_scaling_factor
// x the depths' weighted sums, plus MoE balance terms) by finite differences.
// The semantics (which token each depth embeds and predicts) are checked
// against the independent PyTorch reference (tests/reference).
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

using testing::ExpectGradientMatches;
using testing::GradCheckOptions;

constexpr int64_t kBatch = 2, kSeq = 6;
constexpr double kMtpScale = 0.3;
// fp32 forwards differenced with h = 1e-2 on an O(10) objective: ~1e-3
// relative; a wrong term is off by O(1). The MoE model steps by 1e-3 to stay
// clear of router choice flips.
const GradCheckOptions kDenseTolerance{/*step=*/1e-2, /*rel_tol=*/3e-2, /*abs_tol=*/5e-4,
                                       /*max_checks=*/6};
const GradCheckOptions kMoeTolerance{/*step=*/1e-3, /*rel_tol=*/3e-2, /*abs_tol=*/3e-3,
                                     /*max_checks=*/8};

struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch MakeBatch(int vocab) {
  Batch b{std::vector<int32_t>(kBatch * kSeq), std::vector<int32_t>(kBatch * kSeq)};
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    b.inputs[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    b.targets[i] = static_cast<int32_t>((i * 5 + 1) % vocab);
  }
  return b;
}

ModelConfig WithMtp(ModelConfig c, int depths) {
  c.set_num_nextn_predict_layers(depths);
  return c;
}

// The objective a backward with grad_scale 1 differentiates: the main
// cross-entropy sum, the depths' sums weighted by the scaling factor, and
// seq x each MoE layer's balance sum (its weight per sequence).
double Objective(LanguageModel& model, const Batch& b) {
  for (MoeMlpLayer* moe : model.moe_layers()) moe->ResetStats();
  double ce = 0;
  model.ForwardStage(0, 0, b.inputs.data(), Tensor(), b.targets.data(), kBatch, kSeq, 1.0f, &ce);
  model.ReleaseActivations();  // no backward follows
  double objective = ce + kMtpScale * model.TakeMtpLossSum();
  for (MoeMlpLayer* moe : model.moe_layers()) objective += kSeq * moe->aux_loss_sum();
  return objective;
}

void CheckObjectiveGradients(const ModelConfig& config, const GradCheckOptions& tolerance) {
  LanguageModel model(config, 5);
  model.set_mtp_loss_scaling_factor(kMtpScale);
  const Batch b = MakeBatch(config.vocab_size());
  model.parameters().ZeroGrads();
  testing::ForwardBackward(model, b.inputs.data(), b.targets.data(), kBatch, kSeq, 1.0f);
  EXPECT_GT(model.TakeMtpLossSum(), 0.0);
  EXPECT_EQ(model.TakeMtpLossSum(), 0.0) << "taking the sum resets it";
  for (Parameter& p : model.parameters().all()) {
    if (!p.trainable) continue;
    Tensor grad = p.grad.Clone();
    ExpectGradientMatches(
        p.name, p.value.f32(), p.value.numel(), grad.f32(), [&] { return Objective(model, b); },
        tolerance);
  }
}

TEST(MultiTokenPredictionTest, DeepSeekV3NamesAfterTheMainLayers) {
  const ModelConfig c =
      WithMtp(testing::TinyGqaConfig(/*tie_word_embeddings=*/false, /*layers=*/2), 2);
  LanguageModel model(c, 5);
  for (int layer : {2, 3}) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    for (const char* norm :
         {"enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight"}) {
      const Parameter* p = model.parameters().Find(prefix + norm);
      ASSERT_NE(p, nullptr) << prefix << norm;
      EXPECT_EQ(p->global_shape, (Shape{c.hidden_size()}));
    }
    const Parameter* eh_proj = model.parameters().Find(prefix + "eh_proj.weight");
    ASSERT_NE(eh_proj, nullptr);
    EXPECT_EQ(eh_proj->global_shape, (Shape{c.hidden_size(), 2 * c.hidden_size()}));
    EXPECT_NE(model.parameters().Find(prefix + "self_attn.q_proj.weight"), nullptr);
    EXPECT_NE(model.parameters().Find(prefix + "mlp.down_proj.weight"), nullptr);
  }
  EXPECT_EQ(model.parameters().Find("model.layers.4.enorm.weight"), nullptr);
  // The table and head are shared: one each.
  int tables = 0;
  for (const Parameter& p : model.parameters().all())
    tables += p.name == "model.embed_tokens.weight";
  EXPECT_EQ(tables, 1);
}

TEST(MultiTokenPredictionTest, EvaluationReportsTheMainLossOnly) {
  const ModelConfig plain = testing::TinyGqaConfig(false);
  LanguageModel with(WithMtp(plain, 1), 5), without(plain, 5);
  const Batch b = MakeBatch(plain.vocab_size());
  EXPECT_EQ(testing::ForwardLoss(with, b.inputs.data(), b.targets.data(), kBatch, kSeq),
            testing::ForwardLoss(without, b.inputs.data(), b.targets.data(), kBatch, kSeq));
  EXPECT_EQ(with.TakeMtpLossSum(), 0.0);
}

TEST(MultiTokenPredictionTest, TwoDepthsObjectiveGradients) {
  CheckObjectiveGradients(
      WithMtp(testing::TinyGqaConfig(/*tie_word_embeddings=*/false, /*layers=*/1), 2),
      kDenseTolerance);
}

TEST(MultiTokenPredictionTest, TiedEmbeddingsObjectiveGradients) {
  CheckObjectiveGradients(
      WithMtp(testing::TinyGqaConfig(/*tie_word_embeddings=*/true, /*layers=*/1), 1),
      kDenseTolerance);
}

// DeepSeek-V3's shape: MLA, a dense first layer, MoE after it and in the
// prediction depth, whose router and balance term count too.
TEST(MultiTokenPredictionTest, MlaMoeObjectiveGradients) {
  ModelConfig c = testing::WithTinyMoe(
      WithMtp(testing::TinyMlaConfig(/*tie_word_embeddings=*/false, /*q_lora_rank=*/6), 1),
      /*aux_loss_alpha=*/0.1);
  c.set_vocab_size(11);
  LanguageModel probe(c, 5);
  ASSERT_EQ(probe.moe_layers().size(), 2u) << "layer 1 and the prediction depth's block";
  CheckObjectiveGradients(c, kMoeTolerance);
}

}  // namespace
}  // namespace tetra
