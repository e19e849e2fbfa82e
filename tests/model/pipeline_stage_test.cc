// Pipeline stages of the Llama model in one process: the 4-layer GQA model
// split into 2 and into 4 stages (separate LanguageModel objects, same seed),
// run with two micro-batches in flight under the 1F1B order, hidden states
// passed forward and their gradients back from stage to stage. The losses and
// every parameter's value and gradient (matched by name) must equal the
// whole model's exactly: each stage runs the same ops on the same numbers in
// the same order, and each parameter accumulates its micro-batches in the
// same order (0 then 1), so there is no round-off to allow for.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

constexpr int64_t kBatch = 2, kSeq = 5, kMicroBatches = 2;
constexpr uint64_t kSeed = 1234;

ModelConfig FourLayerConfig(bool tie) {
  ModelConfig c;
  c.set_vocab_size(11);
  c.set_hidden_size(16);
  c.set_num_hidden_layers(4);
  c.set_num_attention_heads(4);
  c.set_num_key_value_heads(2);  // grouped-query attention
  c.set_intermediate_size(24);
  c.set_tie_word_embeddings(tie);
  c.set_initializer_range(0.3);
  return c;
}

// Token ids of micro-batch `mb`: inputs (offset 0) or targets (offset 1).
std::vector<int32_t> Tokens(int mb, int offset) {
  std::vector<int32_t> t(kBatch * kSeq);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((7 * i + 3 * mb + offset) % 11);
  return t;
}

struct Step {
  bool forward;
  int micro_batch;
};

// The 1F1B order of stage `s` of `stages`: min(stages - s - 1, m) warm-up
// forwards, then one forward / one backward in turn, then the last backwards.
std::vector<Step> OneFOneB(int s, int stages) {
  const int warmup = std::min<int>(stages - s - 1, kMicroBatches);
  std::vector<Step> steps;
  for (int mb = 0; mb < warmup; ++mb) steps.push_back({true, mb});
  for (int mb = warmup; mb < kMicroBatches; ++mb) {
    steps.push_back({true, mb});
    steps.push_back({false, mb - warmup});
  }
  for (int mb = kMicroBatches - warmup; mb < kMicroBatches; ++mb) steps.push_back({false, mb});
  return steps;
}

void ExpectSameTensor(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int mismatches = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (got.f32()[i] != want.f32()[i] && ++mismatches <= 3) {
      ADD_FAILURE() << what << " element " << i << ": " << got.f32()[i] << " vs " << want.f32()[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// Runs the model cut into stages of `layers[s]` layers under 1F1B and
// compares with the whole model running the same micro-batches.
void CheckStagesMatchWholeModel(const std::vector<int>& layers) {
  const ModelConfig config = FourLayerConfig(/*tie=*/false);
  const int stages = layers.size();
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);

  LanguageModel whole(config, kSeed);
  std::vector<double> want_loss(kMicroBatches);
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    want_loss[mb] = testing::Forward(whole, mb, Tokens(mb, 0).data(), Tokens(mb, 1).data(), kBatch,
                                     kSeq, grad_scale);
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) testing::Backward(whole, mb);

  std::vector<std::unique_ptr<LanguageModel>> models;
  for (int s = 0, first = 0; s < stages; first += layers[s++]) {
    const PipelineStage stage{.first_layer = first,
                              .num_layers = layers[s],
                              .has_embedding = s == 0,
                              .has_head = s == stages - 1};
    models.push_back(
        std::make_unique<LanguageModel>(config, kSeed, ModelParallelism{.chunks = {stage}}));
  }

  // Messages in flight, cloned as a point-to-point transfer would copy them:
  // the activation into stage s and the gradient out of stage s, by micro-batch.
  std::map<std::pair<int, int>, Tensor> activations, gradients;
  std::vector<double> got_loss(kMicroBatches, -1.0);
  std::vector<std::vector<Step>> orders;
  for (int s = 0; s < stages; ++s) orders.push_back(OneFOneB(s, stages));
  std::vector<size_t> next(stages, 0);
  // Each round, every stage whose next step has its input runs it.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == orders[s].size()) continue;
      const Step step = orders[s][next[s]];
      const std::pair<int, int> key{s, step.micro_batch};
      LanguageModel& m = *models[s];
      const std::vector<int32_t> inputs = Tokens(step.micro_batch, 0);
      const std::vector<int32_t> targets = Tokens(step.micro_batch, 1);
      if (step.forward) {
        if (s > 0 && !activations.count(key)) continue;
        const Tensor out = m.ForwardStage(step.micro_batch, 0, inputs.data(),
                                          s > 0 ? activations.at(key) : Tensor(), targets.data(),
                                          kBatch, kSeq, grad_scale, &got_loss[step.micro_batch]);
        EXPECT_EQ(out.defined(), s < stages - 1);
        // The stage keeps its own copy: the caller may reuse its receive buffer.
        if (s > 0) activations.at(key).Fill(-1e30f);
        if (s < stages - 1) activations[{s + 1, step.micro_batch}] = out.Clone();
      } else {
        const std::pair<int, int> from{s + 1, step.micro_batch};
        if (s < stages - 1 && !gradients.count(from)) continue;
        std::vector<int64_t> ready;
        const Tensor d =
            m.BackwardStage(step.micro_batch, 0, s < stages - 1 ? gradients.at(from) : Tensor(),
                            [&](int64_t offset) { ready.push_back(offset); });
        EXPECT_EQ(d.defined(), s > 0);
        if (s > 0) gradients[key] = d.Clone();
        if (s < stages - 1) gradients.at(from).Fill(-1e30f);
        ASSERT_FALSE(ready.empty());
        EXPECT_TRUE(std::is_sorted(ready.rbegin(), ready.rend())) << "stage " << s;
        EXPECT_EQ(std::adjacent_find(ready.begin(), ready.end()), ready.end()) << "stage " << s;
        EXPECT_EQ(ready.back(), 0) << "stage " << s;
      }
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    ASSERT_EQ(next[s], orders[s].size()) << "stage " << s << " stuck";
  }
  for (int mb = 0; mb < kMicroBatches; ++mb) EXPECT_EQ(got_loss[mb], want_loss[mb]) << "mb " << mb;

  // Every parameter lives on exactly one stage, under its global name.
  std::set<std::string> seen;
  for (int s = 0; s < stages; ++s) {
    for (Parameter& p : models[s]->parameters().all()) {
      EXPECT_TRUE(seen.insert(p.name).second) << p.name << " on two stages";
      Parameter* w = whole.parameters().Find(p.name);
      ASSERT_NE(w, nullptr) << p.name;
      ExpectSameTensor(p.value, w->value, p.name + " value");
      ExpectSameTensor(p.grad, w->grad, p.name + " grad");
    }
  }
  EXPECT_EQ(seen.size(), whole.parameters().all().size());
}

TEST(PipelineStageTest, TwoStagesMatchTheWholeModel) { CheckStagesMatchWholeModel({2, 2}); }

TEST(PipelineStageTest, FourStagesMatchTheWholeModel) { CheckStagesMatchWholeModel({1, 1, 1, 1}); }

TEST(PipelineStageTest, UnevenStagesMatchTheWholeModel) { CheckStagesMatchWholeModel({3, 1}); }

TEST(PipelineStageTest, StageHoldsOnlyItsLayersUnderGlobalNames) {
  const ModelConfig config = FourLayerConfig(/*tie=*/false);
  LanguageModel middle(
      config, kSeed,
      ModelParallelism{
          .chunks = {
              {.first_layer = 2, .num_layers = 1, .has_embedding = false, .has_head = false}}});
  for (const Parameter& p : middle.parameters().all()) {
    EXPECT_EQ(p.name.rfind("model.layers.2.", 0), 0u) << p.name;
  }
  EXPECT_EQ(middle.parameters().Find("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(middle.parameters().Find("lm_head.weight"), nullptr);
  EXPECT_EQ(middle.parameters().Find("model.norm.weight"), nullptr);
}

// The last stage's LM head holds its own copy of a tied table, drawn from the
// same (seed, name, index) as the first stage's, so the two start equal.
TEST(PipelineStageTest, TiedEmbeddingCopiesStartEqual) {
  const ModelConfig config = FourLayerConfig(/*tie=*/true);
  LanguageModel first(config, kSeed,
                      ModelParallelism{.chunks = {{.num_layers = 2, .has_head = false}}});
  LanguageModel last(config, kSeed,
                     ModelParallelism{.chunks = {{.first_layer = 2, .has_embedding = false}}});
  LanguageModel whole(config, kSeed);
  ASSERT_NE(first.embedding_copy(), nullptr);
  ASSERT_NE(last.embedding_copy(), nullptr);
  EXPECT_EQ(whole.embedding_copy(), nullptr);
  EXPECT_EQ(last.embedding_copy()->name, "model.embed_tokens.weight");
  EXPECT_EQ(last.embedding_copy()->stage_copies, 2);
  ExpectSameTensor(last.embedding_copy()->value, first.embedding_copy()->value, "copies");
  ExpectSameTensor(first.embedding_copy()->value,
                   whole.parameters().Find("model.embed_tokens.weight")->value, "whole");
}

TEST(PipelineStageDeathTest, EmbeddingOnlyOnTheFirstChunk) {
  const ModelConfig config = FourLayerConfig(/*tie=*/false);
  EXPECT_DEATH(LanguageModel(config, kSeed,
                             ModelParallelism{.chunks = {{.num_layers = 1, .has_embedding = false},
                                                         {.first_layer = 2, .num_layers = 1}}}),
               "only the first chunk may hold the embedding");
}

}  // namespace
}  // namespace tetra
