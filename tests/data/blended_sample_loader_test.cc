// Blended samples: global sample i is sample j of data set d's own loader,
// (d, j) from the blending index; the samples are a pure function of
// (weights, seed); random access equals sequential access; each data set wraps
// and reports its epochs on its own; errors still name the file; and
// OpenTrainingData opens a blend of Megatron data sets from data.path and
// data.valid_path.
#include "data/blended_sample_loader.h"

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "data/data_blend.h"
#include "data/megatron_dataset.h"
#include "data/sample_loader.h"
#include "data/token_stream.h"
#include "data/training_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

constexpr int64_t kSeq = 3;
constexpr int64_t kVocab = 10000;
// Data set d's token at position p is kBase[d] + p, so a sample shows where it
// came from; sizes give 5, 9 and 14 samples of 3 tokens per epoch.
constexpr int64_t kBase[] = {1000, 2000, 3000};
constexpr int64_t kTokens[] = {16, 28, 43};

std::unique_ptr<TokenStream> Stream(int d) {
  std::vector<int32_t> tokens(kTokens[d]);
  std::iota(tokens.begin(), tokens.end(), kBase[d]);
  return std::make_unique<VectorTokenStream>("set" + std::to_string(d), std::move(tokens));
}

SampleLoader Loader(int d, bool shuffle, uint64_t seed) {
  absl::StatusOr<SampleLoader> loader =
      SampleLoader::Create(Stream(d), kSeq, shuffle, seed, kVocab, d);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return *std::move(loader);
}

BlendedSampleLoader Blend(const std::string& blend_text, bool shuffle, uint64_t seed) {
  absl::StatusOr<DataBlend> blend = ParseDataBlend(blend_text, "data.path");
  EXPECT_TRUE(blend.ok()) << blend.status();
  std::vector<SampleLoader> data_sets;
  for (size_t d = 0; d < blend->weights.size(); ++d) data_sets.push_back(Loader(d, shuffle, seed));
  return BlendedSampleLoader(std::move(data_sets), blend->weights);
}

// Inputs then targets of samples [first, first + count), concatenated.
std::vector<int32_t> Samples(SampleSource& source, int64_t first, int64_t count) {
  std::vector<int32_t> inputs(count * kSeq), targets(count * kSeq);
  EXPECT_TRUE(source.Load(first, count, inputs.data(), targets.data()).ok());
  inputs.insert(inputs.end(), targets.begin(), targets.end());
  return inputs;
}

TEST(BlendedSampleLoaderTest, SampleIIsTheDrawnDataSetsOwnSample) {
  // 200 samples wrap every data set several times (5, 9, 14 samples an epoch).
  constexpr int64_t kSamples = 200;
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    BlendedSampleLoader blend = Blend("0.2 a 0.3 b 0.5 c", shuffle, 7);
    BlendingIndex index(ParseDataBlend("0.2 a 0.3 b 0.5 c", "data.path")->weights);
    std::vector<SampleLoader> alone;
    for (int d = 0; d < 3; ++d) alone.push_back(Loader(d, shuffle, 7));
    for (int64_t i = 0; i < kSamples; ++i) {
      const BlendingIndex::Draw draw = index.At(i);
      ASSERT_EQ(Samples(blend, i, 1), Samples(alone[draw.data_set], draw.sample, 1))
          << "sample " << i;
    }
  }
  // By hand, unshuffled: samples 0..2 are c's 0, b's 0, a's 0
  // (data_blend_test works out the draws), i.e. tokens [3000, 3003),
  // [2000, 2003), [1000, 1003) as inputs.
  BlendedSampleLoader blend = Blend("0.2 a 0.3 b 0.5 c", false, 7);
  EXPECT_THAT(Samples(blend, 0, 3),
              ElementsAre(3000, 3001, 3002, 2000, 2001, 2002, 1000, 1001, 1002,  // inputs
                          3001, 3002, 3003, 2001, 2002, 2003, 1001, 1002, 1003));
  EXPECT_EQ(blend.samples_per_epoch(), 5 + 9 + 14);
  EXPECT_EQ(blend.seq_length(), kSeq);
}

TEST(BlendedSampleLoaderTest, APureFunctionOfWeightsAndSeed) {
  BlendedSampleLoader a = Blend("0.3 a 0.7 b", true, 11), b = Blend("0.3 a 0.7 b", true, 11);
  BlendedSampleLoader unnormalised = Blend("3 a 7 b", true, 11);
  BlendedSampleLoader other_seed = Blend("0.3 a 0.7 b", true, 12);
  const std::vector<int32_t> samples = Samples(a, 0, 60);
  EXPECT_EQ(Samples(b, 0, 60), samples);
  EXPECT_EQ(Samples(unnormalised, 0, 60), samples);
  EXPECT_NE(Samples(other_seed, 0, 60), samples);
  // The seed reorders samples within each data set, not the blend: the same
  // data set at every sample, so the same token range.
  const std::vector<int32_t> reseeded = Samples(other_seed, 0, 60);
  for (size_t k = 0; k < samples.size(); ++k) ASSERT_EQ(samples[k] / 1000, reseeded[k] / 1000) << k;
  // Unshuffled, the seed changes nothing.
  BlendedSampleLoader plain = Blend("0.3 a 0.7 b", false, 11),
                      plain_other = Blend("0.3 a 0.7 b", false, 12);
  EXPECT_EQ(Samples(plain, 0, 60), Samples(plain_other, 0, 60));
}

TEST(BlendedSampleLoaderTest, ABlendOfOneIsTheDataSetAlone) {
  BlendedSampleLoader blend = Blend("5 a", true, 3);
  SampleLoader alone = Loader(0, true, 3);
  EXPECT_EQ(Samples(blend, 0, 17), Samples(alone, 0, 17));
}

TEST(BlendedSampleLoaderTest, RandomAccessEqualsSequentialAccess) {
  BlendedSampleLoader sequential = Blend("0.2 a 0.3 b 0.5 c", true, 5);
  const std::vector<int32_t> all = Samples(sequential, 0, 100);
  // A resumed run's first load starts mid-blend; later loads go back.
  BlendedSampleLoader random = Blend("0.2 a 0.3 b 0.5 c", true, 5);
  for (int64_t first : {64, 8, 97, 0, 50, 49}) {
    const std::vector<int32_t> got = Samples(random, first, 3);
    std::vector<int32_t> want(all.begin() + first * kSeq, all.begin() + (first + 3) * kSeq);
    want.insert(want.end(), all.begin() + 100 * kSeq + first * kSeq,
                all.begin() + 100 * kSeq + (first + 3) * kSeq);
    EXPECT_EQ(got, want) << "from sample " << first;
  }
  std::vector<int32_t> inputs(kSeq), targets(kSeq);
  EXPECT_FALSE(random.Load(-1, 1, inputs.data(), targets.data()).ok());
}

TEST(BlendedSampleLoaderTest, EachDataSetReportsItsOwnEpochs) {
  BlendedSampleLoader blend = Blend("0.5 a 0.5 b", false, 1);
  std::vector<std::string> reported;
  blend.set_epoch_callback([&](const std::string& data_set, int64_t epoch) {
    reported.push_back(data_set + " " + std::to_string(epoch));
  });
  // Equal weights alternate a, b, a, b, ... (ties to a): after 12 samples a
  // has given 6 (epoch 1 from its 6th, a's sample 5), b 6 (epoch 0).
  Samples(blend, 0, 12);
  EXPECT_THAT(reported, ElementsAre("set0 1"));
  Samples(blend, 12, 8);  // a's samples 6..9, b's 6..9: b enters epoch 1
  EXPECT_THAT(reported, ElementsAre("set0 1", "set1 1"));
}

TEST(BlendedSampleLoaderTest, TokenOutsideTheVocabularyNamesItsDataSet) {
  std::vector<SampleLoader> data_sets;
  data_sets.push_back(Loader(0, false, 1));
  auto bad = SampleLoader::Create(
      std::make_unique<VectorTokenStream>("bad.bin", std::vector<int32_t>{1, 2, -4, 3}), kSeq,
      false, 1, kVocab, 1);
  ASSERT_TRUE(bad.ok());
  data_sets.push_back(*std::move(bad));
  BlendedSampleLoader blend(std::move(data_sets), {0.5, 0.5});
  std::vector<int32_t> inputs(2 * kSeq), targets(2 * kSeq);
  const absl::Status status =
      blend.Load(0, 2, inputs.data(), targets.data());  // a's 0, then bad's 0
  EXPECT_THAT(Message(status),
              HasSubstr("bad.bin: token at position 2 is -4, outside the vocabulary [0, 10000)"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

// OpenTrainingData on real Megatron data sets written by WriteMegatronDataset.
class OpenBlendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::tetra::testing::ScratchDir("blended_sample_loader_test");
    for (int d = 0; d < 2; ++d) {
      std::vector<int32_t> tokens(kTokens[d]);
      std::iota(tokens.begin(), tokens.end(), kBase[d]);
      ASSERT_TRUE(WriteMegatronDataset(Prefix(d), {tokens}, kMegatronUint16).ok());
    }
    config_.mutable_model()->set_vocab_size(kVocab);
    config_.mutable_train()->set_seq_length(kSeq);
    config_.mutable_data()->set_format(DataConfig::MEGATRON);
  }
  std::string Prefix(int d) const { return dir_ + "/set" + std::to_string(d); }

  std::string dir_;
  TrainerConfig config_;
};

TEST_F(OpenBlendTest, DataPathAndValidPathTakeBlends) {
  config_.mutable_data()->set_path("0.2 " + Prefix(0) + " 0.3 " + Prefix(1));  // weights 0.4, 0.6
  config_.mutable_data()->set_valid_path("1 " + Prefix(1) + " 1 " + Prefix(0));
  absl::StatusOr<TrainingData> data = OpenTrainingData(config_);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->description,
              HasSubstr("blend of 0.4 " + Prefix(0) + " (16 tokens), 0.6 " + Prefix(1)));
  // Weights 0.4, 0.6: sample 0 is set1's 0 (0.6 > 0.4), sample 1 set0's 0.
  EXPECT_THAT(Samples(*data->loader, 0, 2),
              ElementsAre(2000, 2001, 2002, 1000, 1001, 1002,  // inputs
                          2001, 2002, 2003, 1001, 1002, 1003));
  ASSERT_NE(data->validation, nullptr);
  // Equal weights: set1 (listed first) first.
  EXPECT_THAT(Samples(*data->validation, 0, 1), ElementsAre(2000, 2001, 2002, 2001, 2002, 2003));
  // One prefix is still one data set.
  config_.mutable_data()->set_path(Prefix(0));
  data = OpenTrainingData(config_);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->description, Prefix(0) + " (16 tokens)");
}

TEST_F(OpenBlendTest, BadBlendsAndMissingDataSetsAreUserErrors) {
  config_.mutable_data()->set_path("0.5 " + Prefix(0) + " 0.5");
  EXPECT_THAT(Message(OpenTrainingData(config_).status()), HasSubstr("has 3 words"));
  config_.mutable_data()->set_path("0.5 " + Prefix(0) + " 0.5 " + dir_ + "/missing");
  const std::string missing = Message(OpenTrainingData(config_).status());
  EXPECT_THAT(missing, HasSubstr(dir_ + "/missing.idx"));
  EXPECT_THAT(missing, UserErrorShape());
  config_.mutable_data()->set_path(Prefix(0));
  config_.mutable_data()->set_valid_path("x " + Prefix(0) + " 1 " + Prefix(1));
  EXPECT_THAT(Message(OpenTrainingData(config_).status()),
              HasSubstr("data.valid_path: the weight of data set"));
}

}  // namespace
}  // namespace tetra
