#include "core/philox.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tetra {
namespace {

// Known-answer vectors of Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(PhiloxTest, DrawIsAPureFunctionOfSeedStreamAndIndex) {
  CounterRng a(42, StableHash("model.layers.0.mlp.up_proj.weight"));
  CounterRng b(42, StableHash("model.layers.0.mlp.up_proj.weight"));
  CounterRng other(42, StableHash("model.layers.1.mlp.up_proj.weight"));
  EXPECT_EQ(a.Normal(12345), b.Normal(12345));
  EXPECT_NE(a.Normal(12345), other.Normal(12345));
  EXPECT_NE(a.Normal(1), a.Normal(2));
}

TEST(PhiloxTest, NormalHasUnitMomentsAndUniformIsOpen) {
  CounterRng rng(1, 2);
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    double x = rng.Normal(i);
    sum += x;
    sum_sq += x * x;
    double u = rng.Uniform(i, 3);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  // Standard errors: mean 1/sqrt(n) ~ 0.0022, variance sqrt(2/n) ~ 0.0032.
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.015);
}

}  // namespace
}  // namespace tetra
