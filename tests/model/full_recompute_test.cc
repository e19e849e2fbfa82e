// Full activation recompute (LanguageModel::set_full_recompute, each
// recomputed block wrapped in a RecomputedBlock) against the same model
// without it: both run the forwards of three micro-batches, in flight
// together (the recomputed blocks' one slot 0 is overwritten by each), an
// evaluation in a fourth slot between them, then the backwards in reverse
// order. The recompute runs the same ops in the same order, so the losses,
// every d hidden_in, the readiness offsets, every gradient and the MoE
// statistics (which a recompute must not count twice) are bit-identical.
#include <cstring>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/testing/tiny_models.h"

namespace tetra {
namespace {

constexpr int64_t kBatch = 2, kSeq = 6;
constexpr int kMicroBatches = 3;
constexpr int kEvaluationSlot = kMicroBatches;
constexpr uint64_t kSeed = 91;

std::vector<int32_t> Tokens(const ModelConfig& c, int mb, int offset) {
  std::vector<int32_t> t(kBatch * kSeq);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int32_t>((7 * i + 5 * mb + offset) % c.vocab_size());
  return t;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.numel() * DTypeSize(a.dtype())) == 0;
}

// A (rows, C) tensor of values from `seed`: a stage input or output gradient.
Tensor Rows(const ModelConfig& c, int seed, float scale) {
  Tensor t = Tensor::Empty({kBatch * kSeq, c.hidden_size()});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * (((i * 7 + seed) % 13) - 6);
  return t;
}

// What one model computed: per micro-batch its loss, d hidden_in and
// readiness offsets.
struct Run {
  std::vector<double> losses;
  std::vector<Tensor> d_inputs;
  std::vector<std::vector<int64_t>> ready;
};

Run RunMicroBatches(LanguageModel& model, const ModelConfig& c) {
  const PipelineStage& chunk = model.chunk(0);
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);
  Run run{std::vector<double>(kMicroBatches), std::vector<Tensor>(kMicroBatches),
          std::vector<std::vector<int64_t>>(kMicroBatches)};
  const auto forward = [&](int slot, bool with_grad, double* loss) {
    const std::vector<int32_t> inputs = Tokens(c, slot, 0), targets = Tokens(c, slot, 1);
    const Tensor hidden_in = chunk.has_embedding ? Tensor() : Rows(c, slot, 0.1f);
    if (with_grad) {
      model.ForwardStage(slot, 0, inputs.data(), hidden_in, targets.data(), kBatch, kSeq,
                         grad_scale, loss);
    } else {
      model.EvaluateStage(slot, 0, inputs.data(), hidden_in, targets.data(), kBatch, kSeq, loss);
    }
  };
  double evaluation_loss = 0;
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    forward(mb, /*with_grad=*/true, &run.losses[mb]);
    if (mb == 0) forward(kEvaluationSlot, /*with_grad=*/false, &evaluation_loss);
  }
  for (int mb = kMicroBatches - 1; mb >= 0; --mb) {
    const Tensor d_out = chunk.has_head ? Tensor() : Rows(c, mb + 20, 0.01f);
    const Tensor d =
        model.BackwardStage(mb, 0, d_out, [&](int64_t x) { run.ready[mb].push_back(x); });
    if (d.defined()) run.d_inputs[mb] = d.Clone();
  }
  return run;
}

// `layers`: set_full_recompute's (0: every block of the chunk).
void CheckFullRecomputeMatches(const ModelConfig& c, int layers,
                               std::optional<PipelineStage> stage = std::nullopt) {
  ModelParallelism parallelism;
  if (stage) parallelism.chunks = {*stage};
  LanguageModel plain(c, kSeed, parallelism), recomputed(c, kSeed, parallelism);
  recomputed.set_full_recompute(layers);
  const Run want = RunMicroBatches(plain, c), got = RunMicroBatches(recomputed, c);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    EXPECT_EQ(got.losses[mb], want.losses[mb]) << "micro-batch " << mb;
    EXPECT_EQ(got.d_inputs[mb].defined(), want.d_inputs[mb].defined());
    if (want.d_inputs[mb].defined()) {
      EXPECT_TRUE(SameBits(got.d_inputs[mb], want.d_inputs[mb])) << "d hidden_in of " << mb;
    }
    EXPECT_EQ(got.ready[mb], want.ready[mb]) << "readiness offsets of micro-batch " << mb;
  }
  for (const Parameter& p : plain.parameters().all()) {
    if (!p.trainable) continue;
    EXPECT_TRUE(SameBits(recomputed.parameters().Find(p.name)->grad, p.grad)) << p.name;
  }
  ASSERT_EQ(recomputed.moe_layers().size(), plain.moe_layers().size());
  for (size_t i = 0; i < plain.moe_layers().size(); ++i) {
    EXPECT_TRUE(SameBits(recomputed.moe_layers()[i]->loads(), plain.moe_layers()[i]->loads()));
    EXPECT_EQ(recomputed.moe_layers()[i]->aux_loss_sum(), plain.moe_layers()[i]->aux_loss_sum());
  }
}

TEST(FullRecomputeTest, EveryBlockOfADenseModel) {
  CheckFullRecomputeMatches(testing::TinyGqaConfig(/*tie_word_embeddings=*/false, /*layers=*/3), 0);
}

TEST(FullRecomputeTest, FirstBlocksOnly) {
  const ModelConfig c = testing::TinyGqaConfig(/*tie_word_embeddings=*/true, /*layers=*/3);
  CheckFullRecomputeMatches(c, 1);
  CheckFullRecomputeMatches(c, 2);
}

TEST(FullRecomputeTest, MlaMixtureOfExpertsAndMultiTokenPrediction) {
  ModelConfig c =
      testing::WithTinyMoe(testing::TinyMlaConfig(/*tie_word_embeddings=*/false, /*q_lora_rank=*/6),
                           /*aux_loss_alpha=*/0.1);
  c.set_num_nextn_predict_layers(1);
  CheckFullRecomputeMatches(c, 0);
}

// A middle stage's first recomputed block keeps the copy of hidden_in.
TEST(FullRecomputeTest, MiddleStage) {
  CheckFullRecomputeMatches(
      testing::TinyGqaConfig(false, /*layers=*/4), 1,
      PipelineStage{.first_layer = 1, .num_layers = 2, .has_embedding = false, .has_head = false});
}

TEST(FullRecomputeDeathTest, RefusesASplitBackward) {
  const ModelConfig c = testing::TinyGqaConfig(false);
  LanguageModel model(c, kSeed);
  model.set_full_recompute(1);
  const std::vector<int32_t> inputs = Tokens(c, 0, 0), targets = Tokens(c, 0, 1);
  double loss = 0;
  model.ForwardStage(0, 0, inputs.data(), Tensor(), targets.data(), kBatch, kSeq, 1.0f, &loss);
  EXPECT_DEATH(model.BackwardInputStage(0, 0, Tensor()), "split backward under full activation");
}

}  // namespace
}  // namespace tetra
