// Sample addressing (docs/architecture.md "Numerics of one step"): exact tokens of each
// sample, epochs, shuffling as a pure function of (seed, epoch), and the
// vocabulary check on the tokens a sample loads.
#include "data/sample_loader.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "data/token_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Larger than every token of CountingStream in these tests.
constexpr int64_t kVocab = 1000;

// A stream whose token at position i is 100 + i, so a sample shows where it
// came from.
std::unique_ptr<TokenStream> CountingStream(int64_t size) {
  std::vector<int32_t> tokens(size);
  std::iota(tokens.begin(), tokens.end(), 100);
  return std::make_unique<VectorTokenStream>("counting", std::move(tokens));
}

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

Batch LoadBatch(SampleLoader& loader, int64_t first, int64_t count) {
  Batch batch{std::vector<int32_t>(count * loader.seq_length()),
              std::vector<int32_t>(count * loader.seq_length())};
  EXPECT_TRUE(loader.Load(first, count, batch.inputs.data(), batch.targets.data()).ok());
  return batch;
}

// Start positions (in samples) of `count` run samples from `first`, read back
// from the tokens the loader returns.
std::vector<int64_t> Positions(SampleLoader& loader, int64_t first, int64_t count) {
  Batch batch = LoadBatch(loader, first, count);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < count; ++i) {
    positions.push_back((batch.inputs[i * loader.seq_length()] - 100) / loader.seq_length());
  }
  return positions;
}

TEST(SampleLoaderTest, SamplesAreConsecutiveWindowsWithShiftedTargets) {
  // 23 tokens (100..122), T = 4: (23 - 1) / 4 = 5 samples per epoch; the last
  // two tokens (121, 122) only ever serve as sample 4's final target and beyond.
  auto loader = SampleLoader::Create(CountingStream(23), 4, /*shuffle=*/false, 1, kVocab);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->samples_per_epoch(), 5);
  Batch batch = LoadBatch(*loader, 1, 2);
  EXPECT_THAT(batch.inputs, ElementsAre(104, 105, 106, 107, 108, 109, 110, 111));
  EXPECT_THAT(batch.targets, ElementsAre(105, 106, 107, 108, 109, 110, 111, 112));
  Batch last = LoadBatch(*loader, 4, 1);
  EXPECT_THAT(last.inputs, ElementsAre(116, 117, 118, 119));
  EXPECT_THAT(last.targets, ElementsAre(117, 118, 119, 120));
}

TEST(SampleLoaderTest, WrapsIntoTheNextEpochAndReportsIt) {
  auto loader = SampleLoader::Create(CountingStream(23), 4, /*shuffle=*/false, 1, kVocab);
  ASSERT_TRUE(loader.ok());
  std::vector<int64_t> reported;
  loader->set_epoch_callback([&](const std::string& data_set, int64_t epoch) {
    EXPECT_EQ(data_set, "counting");
    reported.push_back(epoch);
  });
  EXPECT_THAT(Positions(*loader, 3, 4), ElementsAre(3, 4, 0, 1));  // samples 3..6
  EXPECT_THAT(reported, ElementsAre(1));
  Batch wrapped = LoadBatch(*loader, 5, 1);  // sample 5 = epoch 1, position 0
  EXPECT_THAT(wrapped.inputs, ElementsAre(100, 101, 102, 103));
  // Jumping ahead to sample 14 (epoch 2), then crossing into epoch 3.
  EXPECT_THAT(Positions(*loader, 14, 2), ElementsAre(4, 0));
  EXPECT_THAT(reported, ElementsAre(1, 2, 3));
  EXPECT_EQ(loader->EpochOf(14), 2);
  EXPECT_EQ(loader->EpochOf(15), 3);
}

TEST(SampleLoaderTest, ResumingMidEpochReportsNothing) {
  auto loader = SampleLoader::Create(CountingStream(23), 4, /*shuffle=*/false, 1, kVocab);
  ASSERT_TRUE(loader.ok());
  int calls = 0;
  loader->set_epoch_callback([&](const std::string&, int64_t) { ++calls; });
  LoadBatch(*loader, 12, 2);  // epoch 2, positions 2 and 3
  EXPECT_EQ(calls, 0);
}

TEST(SampleLoaderTest, ShuffleIsAPermutationPerEpochAndDeterministic) {
  const int64_t kSamples = 50;  // 50 * 3 + 1 tokens, T = 3
  auto a = SampleLoader::Create(CountingStream(kSamples * 3 + 1), 3, /*shuffle=*/true, 7, kVocab);
  auto b = SampleLoader::Create(CountingStream(kSamples * 3 + 1), 3, /*shuffle=*/true, 7, kVocab);
  auto other_seed =
      SampleLoader::Create(CountingStream(kSamples * 3 + 1), 3, /*shuffle=*/true, 8, kVocab);
  ASSERT_TRUE(a.ok() && b.ok() && other_seed.ok());
  ASSERT_EQ(a->samples_per_epoch(), kSamples);

  std::vector<int64_t> epoch0 = Positions(*a, 0, kSamples);
  std::vector<int64_t> epoch1 = Positions(*a, kSamples, kSamples);
  std::vector<int64_t> identity(kSamples);
  std::iota(identity.begin(), identity.end(), 0);
  for (const auto* epoch : {&epoch0, &epoch1}) {
    std::vector<int64_t> sorted = *epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity);  // every sample exactly once
  }
  EXPECT_NE(epoch0, identity);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(Positions(*other_seed, 0, kSamples), epoch0);

  // Same (seed, epoch) -> same order, whatever was loaded before and in
  // whatever pieces: b reads epoch 1 first, then epoch 0 backwards one by one.
  EXPECT_EQ(Positions(*b, kSamples, kSamples), epoch1);
  for (int64_t i = kSamples - 1; i >= 0; --i) {
    EXPECT_EQ(Positions(*b, i, 1)[0], epoch0[i]);
    EXPECT_EQ(b->PositionOf(i), epoch0[i]);
  }

  // A shuffled sample is still T + 1 consecutive tokens.
  Batch sample = LoadBatch(*a, 0, 1);
  const int32_t start = 100 + static_cast<int32_t>(epoch0[0] * 3);
  EXPECT_THAT(sample.inputs, ElementsAre(start, start + 1, start + 2));
  EXPECT_THAT(sample.targets, ElementsAre(start + 1, start + 2, start + 3));
}

TEST(SampleLoaderTest, TooLittleDataForOneSample) {
  auto loader = SampleLoader::Create(CountingStream(8), 8, /*shuffle=*/false, 1, kVocab);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("counting: 8 tokens"));
  EXPECT_THAT(loader.status().message(), HasSubstr("seq_length + 1 = 9"));
  EXPECT_THAT(std::string(loader.status().message()), testing::UserErrorShape());
  EXPECT_TRUE(SampleLoader::Create(CountingStream(9), 8, false, 1, kVocab).ok());
  EXPECT_FALSE(SampleLoader::Create(CountingStream(9), 0, false, 1, kVocab).ok());
}

TEST(SampleLoaderTest, TokenOutsideTheVocabularyNamesFilePositionAndValue) {
  // T = 3: sample p is tokens [3p, 3p + 3]. Token 7 (= vocab_size) at position
  // 7 is in sample 2 only; sample 3 ends with -2, a token only its targets
  // hold. 0 and vocab_size - 1 are the edges that pass.
  const int64_t vocab = 7;
  auto loader = SampleLoader::Create(
      std::make_unique<VectorTokenStream>(
          "tokens.bin", std::vector<int32_t>{0, 6, 1, 2, 3, 4, 5, 7, 1, 2, 3, 4, -2}),
      3, /*shuffle=*/false, 1, vocab);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_EQ(loader->samples_per_epoch(), 4);
  std::vector<int32_t> inputs(6), targets(6);
  ASSERT_TRUE(loader->Load(0, 2, inputs.data(), targets.data()).ok());
  EXPECT_THAT(inputs, ElementsAre(0, 6, 1, 2, 3, 4));
  absl::Status status = loader->Load(2, 1, inputs.data(), targets.data());
  ASSERT_FALSE(status.ok());
  const std::string message(status.message());
  EXPECT_THAT(message, testing::UserErrorShape());
  EXPECT_THAT(message, HasSubstr("tokens.bin: token at position 7 is 7, outside the vocabulary "
                                 "[0, 7)"));
  EXPECT_THAT(message, HasSubstr("model.vocab_size"));
  status = loader->Load(3, 1, inputs.data(), targets.data());
  EXPECT_THAT(std::string(status.message()), HasSubstr("position 12 is -2"));
}

TEST(SampleLoaderTest, NegativeSampleIndexIsAnError) {
  auto loader = SampleLoader::Create(CountingStream(9), 4, false, 1, kVocab);
  ASSERT_TRUE(loader.ok());
  std::vector<int32_t> inputs(4), targets(4);
  EXPECT_FALSE(loader->Load(-1, 1, inputs.data(), targets.data()).ok());
}

}  // namespace
}  // namespace tetra
