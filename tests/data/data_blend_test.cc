// Megatron-LM blends: parsing and normalising "w1 p1 w2 p2 ..." (numpy's
// summation order included), and the greedy blending index against sequences
// worked out by hand, its proportion guarantee, and random access.
#include "data/data_blend.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;
using Draw = BlendingIndex::Draw;

// The greedy's guarantee (exact arithmetic): after n samples every count is
// within 1 of weight x n. Floating-point error is far below this bound.
constexpr double kProportionSlack = 1.0;

TEST(DataBlendTest, OnePrefixIsNoBlend) {
  absl::StatusOr<DataBlend> blend = ParseDataBlend("data/train_text_document", "data.path");
  ASSERT_TRUE(blend.ok()) << blend.status();
  EXPECT_THAT(blend->prefixes, ElementsAre("data/train_text_document"));
  EXPECT_TRUE(blend->weights.empty());
  // Surrounding whitespace is not part of the prefix.
  EXPECT_THAT(ParseDataBlend("  shards_* \n", "data.path")->prefixes, ElementsAre("shards_*"));
}

TEST(DataBlendTest, WeightsAndPrefixesInPairs) {
  absl::StatusOr<DataBlend> blend = ParseDataBlend("0.3 prefixA\t0.7   prefixB", "data.path");
  ASSERT_TRUE(blend.ok()) << blend.status();
  EXPECT_THAT(blend->prefixes, ElementsAre("prefixA", "prefixB"));
  EXPECT_THAT(blend->weights, ElementsAre(0.3, 0.7));
  // Weights are normalised: "3 A 7 B" is "0.3 A 0.7 B", to the last bit
  // (numpy: [3, 7] / 10 = [0.3, 0.7]).
  absl::StatusOr<DataBlend> unnormalised = ParseDataBlend("3 prefixA 7 prefixB", "data.path");
  ASSERT_TRUE(unnormalised.ok()) << unnormalised.status();
  EXPECT_EQ(unnormalised->weights, blend->weights);
  // A blend of one is still a blend (Megatron-LM builds a BlendedDataset).
  EXPECT_THAT(ParseDataBlend("2 only", "data.path")->weights, ElementsAre(1.0));
  EXPECT_THAT(ParseDataBlend("1e-3 a 3e-3 b +4E-3 c", "data.path")->weights,
              ElementsAre(0.125, 0.375, 0.5));
}

TEST(DataBlendTest, NumpySumsInNumpysOrder) {
  // Fewer than 8 values: left to right, so 1e16 + 1 + 1 = 1e16 (each 1 is
  // half an ulp of 1e16, rounded to even).
  EXPECT_EQ(NumpySum({1e16, 1, 1}), 1e16);
  // 9 values: 8 accumulators r[j] = a[j], combined as ((r0 + r1) + (r2 +
  // r3)) + ((r4 + r5) + (r6 + r7)) = ((1e16 + 1) + 2) + 4 = (1e16 + 2) + 4 =
  // 1e16 + 6, then + a[8] = 1e16 + 7, rounded to even: 1e16 + 8, where a left
  // to right sum stays 1e16. (numpy 1.24: 1.0000000000000008e+16.)
  EXPECT_EQ(NumpySum({1e16, 1, 1, 1, 1, 1, 1, 1, 1}), 1e16 + 8);
  EXPECT_EQ(NumpySum({}), 0.0);
}

TEST(DataBlendTest, BadBlendsAreClearErrors) {
  auto error = [](const std::string& text) {
    return Message(ParseDataBlend(text, "data.path").status());
  };
  for (const char* bad : {"", "0.3 a 0.7", "x a 0.7 b", "0.3 a 0 b", "-1 a 2 b", "nan a 1 b",
                          "inf a 1 b", "1e999 a 1 b", "a 0.3 b 0.7"}) {
    EXPECT_THAT(error(bad), UserErrorShape()) << bad;
  }
  EXPECT_THAT(error("   "), HasSubstr("data.path \"   \" names no data set"));
  EXPECT_THAT(error("0.3 a 0.7"),
              HasSubstr("data.path \"0.3 a 0.7\" has 3 words, but a Megatron-LM blend is pairs "
                        "of weight and prefix"));
  EXPECT_THAT(error("0.3 a 0.7"),
              HasSubstr("\nhint: set data.path to one prefix, or to weights and prefixes such "
                        "as \"0.3 prefixA 0.7 prefixB\""));
  EXPECT_THAT(
      error("0.3 a seven b"),
      HasSubstr("data.path: the weight of data set \"b\" (word 3) is \"seven\", not a number"));
  // Megatron-LM's unweighted list of prefixes is refused, naming the first word.
  EXPECT_THAT(error("a b"),
              HasSubstr("the weight of data set \"b\" (word 1) is \"a\", not a number"));
  EXPECT_THAT(error("0.3 a 0 b"), HasSubstr("data.path: the weight of data set \"b\" is \"0\", but "
                                            "weights must be positive and finite"));
  EXPECT_THAT(error("-1 a 2 b"), HasSubstr("the weight of data set \"a\" is \"-1\""));
  EXPECT_THAT(error("inf a 1 b"), HasSubstr("is \"inf\", but weights must be positive and finite"));
  // User text is quoted short and escaped: one line whatever the input.
  const std::string long_word(200, 'w');
  EXPECT_THAT(error(long_word + "\x01 a 1 b"), HasSubstr("... (201 bytes), not a number"));
  EXPECT_THAT(Message(ParseDataBlend("0.3 a 0.7", "data.valid_path").status()),
              HasSubstr("data.valid_path \""));
}

TEST(BlendingIndexTest, FirstDrawsByHand) {
  // Weights (0.2, 0.3, 0.5); sample i goes to the largest w[d] max(i, 1) -
  // count[d], ties to the lowest d:
  //   i 0: (0.2, 0.3, 0.5)            -> 2   counts (0, 0, 1)
  //   i 1: (0.2, 0.3, -0.5)           -> 1   (0, 1, 1)
  //   i 2: (0.4, -0.4, 0)             -> 0   (1, 1, 1)
  //   i 3: (-0.4, -0.1, 0.5)          -> 2   (1, 1, 2)
  //   i 4: (-0.2, 0.2, 0)             -> 1   (1, 2, 2)
  //   i 5: (0, -0.5, 0.5)             -> 2   (1, 2, 3)
  //   i 6: (0.2, -0.2, 0)             -> 0   (2, 2, 3)
  //   i 7: (-0.6, 0.1, 0.5)           -> 2   (2, 2, 4)
  //   i 8: (-0.4, 0.4, 0)             -> 1   (2, 3, 4)
  //   i 9: (-0.2, -0.3, 0.5)          -> 2   (2, 3, 5)
  //   i 10: (0, 0, 0), a tie          -> 0   (3, 3, 5)
  // (In double, 0.2 x 10 and 0.3 x 10 round to 2 and 3 exactly, so the tie
  // is a tie there too.)
  absl::StatusOr<DataBlend> blend = ParseDataBlend("0.2 a 0.3 b 0.5 c", "data.path");
  ASSERT_TRUE(blend.ok()) << blend.status();
  BlendingIndex index(blend->weights);
  std::vector<Draw> draws;
  for (int64_t i = 0; i <= 10; ++i) draws.push_back(index.At(i));
  EXPECT_EQ(
      draws,
      (std::vector<Draw>{
          {2, 0}, {1, 0}, {0, 0}, {2, 1}, {1, 1}, {2, 2}, {0, 1}, {2, 3}, {1, 2}, {2, 4}, {0, 2}}));
}

TEST(BlendingIndexTest, CountsStayWithinOneOfTheWeightsAtEveryPrefix) {
  absl::StatusOr<DataBlend> blend = ParseDataBlend("0.3 a 0.7 b", "data.path");
  ASSERT_TRUE(blend.ok()) << blend.status();
  BlendingIndex index(blend->weights);
  std::vector<int64_t> counts(2, 0);
  for (int64_t n = 1; n <= 1000; ++n) {
    const Draw draw = index.At(n - 1);
    ASSERT_EQ(draw.sample, counts[draw.data_set])
        << "sample " << n - 1;  // each data set's samples in order
    ++counts[draw.data_set];
    for (int d = 0; d < 2; ++d) {
      ASSERT_LE(std::abs(counts[d] - blend->weights[d] * n), kProportionSlack)
          << "after " << n << " samples";
    }
  }
  EXPECT_EQ(counts, (std::vector<int64_t>{300, 700}));
}

TEST(BlendingIndexTest, RandomAccessEqualsSequentialAccess) {
  absl::StatusOr<DataBlend> blend = ParseDataBlend("0.2 a 0.3 b 0.5 c 1.7 d", "data.path");
  ASSERT_TRUE(blend.ok()) << blend.status();
  // Past two marks (every 2^16 samples), so going back uses a mark or the start.
  constexpr int64_t kSamples = 150000;
  BlendingIndex sequential(blend->weights);
  std::vector<Draw> expected;
  for (int64_t i = 0; i < kSamples; ++i) expected.push_back(sequential.At(i));
  BlendingIndex random(blend->weights);
  for (int64_t i :
       {int64_t{140000}, int64_t{7}, kSamples - 1, int64_t{131072}, int64_t{131071}, int64_t{65536},
        int64_t{140001}, int64_t{0}, int64_t{65535}, int64_t{99999}, int64_t{99998}}) {
    EXPECT_EQ(random.At(i), expected[i]) << "sample " << i;
  }
}

}  // namespace
}  // namespace tetra
