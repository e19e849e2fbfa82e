// YaRN's rotary table (MakeRopeTable with RopeScaling::Type::kYarn) and
// DeepSeek-V3's softmax-scale multiplier against yarn_rope_reference.py, an
// independent computation from the published formulas in Debian's torch, at
// DeepSeek-V3's settings and two others (transformers' defaults without
// mscale at Qwen2.5's long-context sizes; gpt-oss's untruncated ramp with
// mscale and mscale_all_dim unequal).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/op_types.h"

namespace tetra {
namespace {

struct Tolerances {
  // cos and sin of the same fp32 angle rounded from double in both: equal,
  // or an ulp apart where torch's double cos and glibc's differ in the last
  // bit at a rounding tie. An inv_freq an ulp off would be far more at the
  // large positions (the angle moves by position ulps).
  int64_t table_ulps;
  // The same few double operations, maybe contracted into an FMA by the
  // compiler: a few double ulps.
  double multiplier_rel;
};
constexpr Tolerances kTol = {.table_ulps = 1, .multiplier_rel = 1e-15};

struct YarnCase {
  const char* name;
  int64_t dim;
  double theta;
  RopeScaling scaling;
  int64_t seq;  // max_position_embeddings: factor x original
  std::vector<int64_t> positions;
};

std::vector<YarnCase> Cases() {
  return {
      {"DeepSeekV3",
       64,
       10000.0,
       RopeScaling{.type = RopeScaling::Type::kYarn,
                   .factor = 40,
                   .original_max_position_embeddings = 4096,
                   .beta_fast = 32,
                   .beta_slow = 1,
                   .mscale = 1,
                   .mscale_all_dim = 1},
       163840,
       {0, 1, 2, 3, 7, 100, 1000, 4095, 4096, 65535, 100000, 163839}},
      {"NoMscale",
       128,
       1e6,
       RopeScaling{.type = RopeScaling::Type::kYarn,
                   .factor = 4,
                   .original_max_position_embeddings = 32768,
                   .beta_fast = 32,
                   .beta_slow = 1},
       131072,
       {0, 1, 5, 32767, 32768, 131071}},
      {"UntruncatedUnequalMscale",
       64,
       150000.0,
       RopeScaling{.type = RopeScaling::Type::kYarn,
                   .factor = 32,
                   .original_max_position_embeddings = 4096,
                   .beta_fast = 32,
                   .beta_slow = 1,
                   .mscale = 1,
                   .mscale_all_dim = 0.5,
                   .truncate = false},
       131072,
       {0, 1, 9, 4096, 77777, 131071}},
  };
}

struct Reference {
  double attention = 0, softmax_multiplier = 0;
  std::vector<std::vector<uint32_t>> rows;  // per position: cos bits then sin bits
};

// Runs the Python reference for `c` and parses what it prints.
Reference RunReference(const YarnCase& c) {
  const RopeScaling& s = c.scaling;
  std::string command = absl::StrCat(
      "/usr/bin/python3 ", TETRA_SOURCE_DIR, "/tests/kernels/yarn_rope_reference.py --dim ", c.dim,
      " --theta ", c.theta, " --factor ", s.factor, " --original ",
      s.original_max_position_embeddings, " --beta-fast ", s.beta_fast, " --beta-slow ",
      s.beta_slow, " --mscale ", s.mscale, " --mscale-all-dim ", s.mscale_all_dim,
      s.truncate ? "" : " --no-truncate", " --positions ", absl::StrJoin(c.positions, " "));
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  std::string out;
  char buffer[4096];
  for (size_t n; pipe != nullptr && (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    out.append(buffer, n);
  EXPECT_EQ(pipe == nullptr ? -1 : pclose(pipe), 0) << command << "\n" << out;

  Reference ref;
  std::istringstream lines(out);
  std::string word, hex;
  lines >> word >> hex;
  EXPECT_EQ(word, "attention");
  ref.attention = std::strtod(hex.c_str(), nullptr);
  lines >> word >> hex;
  EXPECT_EQ(word, "softmax");
  ref.softmax_multiplier = std::strtod(hex.c_str(), nullptr);
  for (int64_t position : c.positions) {
    int64_t p = -1;
    lines >> p;
    EXPECT_EQ(p, position);
    std::vector<uint32_t> row(c.dim);
    for (uint32_t& bits : row) {
      lines >> hex;
      bits = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
    }
    ref.rows.push_back(row);
  }
  EXPECT_TRUE(lines) << out;
  return ref;
}

// Floats as integers in the order of their values, so ulps are differences.
int64_t Ordered(uint32_t bits) {
  return (bits & 0x80000000u) ? -static_cast<int64_t>(bits & 0x7fffffffu)
                              : static_cast<int64_t>(bits);
}
uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

class YarnRopeTest : public ::testing::TestWithParam<YarnCase> {};

TEST_P(YarnRopeTest, TableAndSoftmaxMultiplierMatchTheReference) {
  const YarnCase& c = GetParam();
  const Reference ref = RunReference(c);
  ASSERT_EQ(ref.rows.size(), c.positions.size());
  const RopeTable table = MakeRopeTable(c.seq, c.dim, c.theta, c.scaling);
  const int64_t half = c.dim / 2;
  ASSERT_EQ(table.half_dim, half);
  // cos(0) is 1: row 0 holds the fp32 attention factor itself.
  EXPECT_EQ(table.cos.f32()[0], static_cast<float>(ref.attention));
  for (size_t k = 0; k < c.positions.size(); ++k) {
    const int64_t p = c.positions[k];
    for (int64_t i = 0; i < half; ++i) {
      const float got_cos = table.cos.f32()[p * half + i], got_sin = table.sin.f32()[p * half + i];
      EXPECT_LE(std::abs(Ordered(Bits(got_cos)) - Ordered(ref.rows[k][i])), kTol.table_ulps)
          << "cos at position " << p << ", frequency " << i;
      EXPECT_LE(std::abs(Ordered(Bits(got_sin)) - Ordered(ref.rows[k][half + i])), kTol.table_ulps)
          << "sin at position " << p << ", frequency " << i;
    }
  }
  EXPECT_NEAR(YarnSoftmaxScaleMultiplier(c.scaling), ref.softmax_multiplier,
              kTol.multiplier_rel * ref.softmax_multiplier);
}

INSTANTIATE_TEST_SUITE_P(Settings, YarnRopeTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// Without YaRN, or without mscale_all_dim, the softmax scale is untouched
// (HF's DeepseekV3Attention multiplies only when mscale_all_dim is set).
TEST(YarnSoftmaxScaleMultiplierTest, IsOneWithoutYarnOrMscaleAllDim) {
  EXPECT_EQ(YarnSoftmaxScaleMultiplier(RopeScaling{}), 1.0);
  EXPECT_EQ(
      YarnSoftmaxScaleMultiplier(RopeScaling{.type = RopeScaling::Type::kLlama3, .factor = 8}),
      1.0);
  EXPECT_EQ(YarnSoftmaxScaleMultiplier(
                RopeScaling{.type = RopeScaling::Type::kYarn, .factor = 40, .mscale = 1}),
            1.0);
}

}  // namespace
}  // namespace tetra
