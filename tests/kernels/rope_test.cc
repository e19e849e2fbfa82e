#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/op_types.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::ProbeLoss;
using ::tetra::testing::RandomVector;

constexpr int64_t kBatch = 2, kSeq = 5, kHeads = 3, kHeadDim = 8;
constexpr double kTheta = 10000.0;

struct Tolerances {
  // Rotation by the closed form in double: the fp32 angle p * inv_freq is off
  // by ~p ulps, i.e. < 1e-6 rad at p < 8, plus fp32 rounding of the outputs.
  double closed_form;
  // Forward then backward: two fp32 rotations of O(1) values, a few ulps.
  double round_trip;
  // RoPE is linear in x: central differences are exact up to fp32 rounding.
  ::tetra::testing::GradCheckOptions grad;
};
constexpr Tolerances kTol = {
    .closed_form = 2e-6,
    .round_trip = 1e-6,
    .grad = {.step = 1e-2, .rel_tol = 1e-3, .abs_tol = 1e-3, .max_checks = 96}};

TEST(RopeTest, TableMatchesHuggingFaceFp32Angles) {
  // HF: inv_freq = 1 / theta ** (arange(0, D, 2).float() / D) and
  // angle = float(p) * inv_freq, all fp32; cos/sin then within an ulp.
  const int64_t seq = 4096;
  const RopeTable table = MakeRopeTable(seq, kHeadDim, kTheta);
  ASSERT_EQ(table.seq, seq);
  ASSERT_EQ(table.half_dim, kHeadDim / 2);
  ASSERT_EQ(table.cos.shape(), (Shape{seq, kHeadDim / 2}));
  ASSERT_EQ(table.sin.shape(), (Shape{seq, kHeadDim / 2}));
  const float* cos = table.cos.f32();
  const float* sin = table.sin.f32();
  for (int64_t p : {0, 1, 1000, 4095}) {
    for (int64_t i = 0; i < kHeadDim / 2; ++i) {
      const float inv_freq =
          1.0f / std::pow(static_cast<float>(kTheta), static_cast<float>(2 * i) / kHeadDim);
      const double angle = static_cast<float>(p) * inv_freq;
      EXPECT_NEAR(cos[p * table.half_dim + i], std::cos(angle), 1e-7) << p << ", " << i;
      EXPECT_NEAR(sin[p * table.half_dim + i], std::sin(angle), 1e-7) << p << ", " << i;
    }
  }
}

TEST(RopeTest, ForwardMatchesClosedFormRotation) {
  std::vector<float> x = RandomVector(kBatch * kSeq * kHeads * kHeadDim, 1);
  const std::vector<float> original = x;
  const RopeTable table = MakeRopeTable(/*seq=*/8, kHeadDim, kTheta);  // longer than kSeq
  RopeForward(x.data(), kBatch, kSeq, kHeads, kHeadDim, table);
  const int64_t half = kHeadDim / 2;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t t = 0; t < kSeq; ++t) {
      for (int64_t h = 0; h < kHeads; ++h) {
        const int64_t base = ((b * kSeq + t) * kHeads + h) * kHeadDim;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = t * std::pow(kTheta, -2.0 * i / kHeadDim);
          const double x1 = original[base + i], x2 = original[base + i + half];
          EXPECT_NEAR(x[base + i], x1 * std::cos(angle) - x2 * std::sin(angle), kTol.closed_form);
          EXPECT_NEAR(x[base + i + half], x2 * std::cos(angle) + x1 * std::sin(angle),
                      kTol.closed_form);
        }
      }
    }
  }
}

// Llama 3.1's scaling, from its defining formula in double: with head_dim 8
// and theta 10^4 the wavelengths 2 pi / inv_freq are 6.3, 63, 628 and 6283;
// with original context 64, low_freq_factor 1 and high_freq_factor 4 the
// first is kept (below 64 / 4), the second blended (between 16 and 64), the
// last two divided by the factor (above 64).
TEST(RopeTest, Llama3ScalingKeepsBlendsAndDividesFrequencies) {
  const RopeScaling scaling{.type = RopeScaling::Type::kLlama3,
                            .factor = 8,
                            .original_max_position_embeddings = 64,
                            .low_freq_factor = 1,
                            .high_freq_factor = 4};
  const int64_t seq = 16;
  const RopeTable table = MakeRopeTable(seq, kHeadDim, kTheta, scaling);
  const double smooth = (64 / (2 * M_PI / 0.1) - 1) / (4 - 1);
  const double expected[4] = {1.0, (1 - smooth) * 0.1 / 8 + smooth * 0.1, 0.01 / 8, 0.001 / 8};
  for (int64_t p = 0; p < seq; ++p) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(table.cos.f32()[p * 4 + i], std::cos(p * expected[i]), 4 * kTol.closed_form)
          << p << " " << i;
      EXPECT_NEAR(table.sin.f32()[p * 4 + i], std::sin(p * expected[i]), 4 * kTol.closed_form)
          << p << " " << i;
    }
  }
  // The default RopeScaling is no scaling: the plain table.
  const RopeTable plain = MakeRopeTable(seq, kHeadDim, kTheta, RopeScaling{});
  const RopeTable unscaled = MakeRopeTable(seq, kHeadDim, kTheta);
  for (int64_t k = 0; k < plain.cos.numel(); ++k)
    EXPECT_EQ(plain.cos.f32()[k], unscaled.cos.f32()[k]);
}

TEST(RopeTest, BackwardUndoesForward) {
  const std::vector<float> original = RandomVector(kBatch * kSeq * kHeads * kHeadDim, 2);
  std::vector<float> x = original;
  const RopeTable table = MakeRopeTable(kSeq, kHeadDim, kTheta);
  RopeForward(x.data(), kBatch, kSeq, kHeads, kHeadDim, table);
  RopeBackward(x.data(), kBatch, kSeq, kHeads, kHeadDim, table);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], original[i], kTol.round_trip) << i;
}

TEST(RopeTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = kBatch * kSeq * kHeads * kHeadDim;
  std::vector<float> x = RandomVector(n, 3);
  const std::vector<float> probe = RandomVector(n, 4);
  const RopeTable table = MakeRopeTable(kSeq, kHeadDim, 500000.0);
  auto loss = [&] {
    std::vector<float> y = x;
    RopeForward(y.data(), kBatch, kSeq, kHeads, kHeadDim, table);
    return ProbeLoss(y.data(), probe);
  };
  std::vector<float> dx = probe;
  RopeBackward(dx.data(), kBatch, kSeq, kHeads, kHeadDim, table);
  ExpectGradientMatches("dx", x.data(), n, dx.data(), loss, kTol.grad);
}

// The fused projection's rows [q | k | v] through SplitQkvRope against
// Linear's column slices of them copied out and rotated by Rope, and
// MergeQkvRopeBackward against RopeBackward on dq, dk with dv, packed: the
// same bits, in fp32 and (rounding once, as the separate ops do) in bf16.
constexpr int64_t kQHeads = 3, kKvHeads = 2, kChannels = 24;

// Columns [begin, begin + width) of packed's rows copied into `part` (rows x
// width elements), or with `into_packed` part copied into them.
void MoveColumns(const Tensor& packed, int64_t begin, const Tensor& part, bool into_packed) {
  const int64_t rows = packed.numel() / packed.dim(-1), width = part.numel() / rows;
  const size_t element = DTypeSize(packed.dtype());
  char* p = static_cast<char*>(packed.raw());
  char* t = static_cast<char*>(part.raw());
  for (int64_t r = 0; r < rows; ++r) {
    char* packed_row = p + (r * packed.dim(-1) + begin) * element;
    char* part_row = t + r * width * element;
    std::memcpy(into_packed ? packed_row : part_row, into_packed ? part_row : packed_row,
                width * element);
  }
}

Tensor RandomIn(const Shape& shape, uint64_t stream, DType dtype) {
  const std::vector<float> values = RandomVector(NumElements(shape), stream);
  Tensor wide = Tensor::Empty(shape);
  std::memcpy(wide.raw(), values.data(), wide.nbytes());
  Tensor t = Tensor::Empty(shape, dtype);
  ops::Cast(wide, t);
  return t;
}

void ExpectSameBits(const Tensor& got, const Tensor& want, const char* name) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << name;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << name << " differs";
}

class QkvRopeTest : public ::testing::TestWithParam<DType> {};

TEST_P(QkvRopeTest, SplitIsLinearSlicesThenRope) {
  const DType dtype = GetParam();
  const int64_t width = (kQHeads + 2 * kKvHeads) * kHeadDim;
  const Tensor x = RandomIn({kBatch * kSeq, kChannels}, 5, dtype);
  const Tensor w = RandomIn({width, kChannels}, 6, dtype);
  const Tensor qkv = Tensor::Empty({kBatch * kSeq, width}, dtype);
  ops::Linear(x, w, qkv);
  const RopeTable table = MakeRopeTable(kSeq, kHeadDim, kTheta);
  const Shape q_shape = {kBatch, kSeq, kQHeads, kHeadDim},
              kv_shape = {kBatch, kSeq, kKvHeads, kHeadDim};
  const Tensor q = Tensor::Empty(q_shape, dtype), k = Tensor::Empty(kv_shape, dtype),
               v = Tensor::Empty(kv_shape, dtype);
  ops::SplitQkvRope(qkv, table, q, k, v);

  const Tensor want_q = Tensor::Empty(q_shape, dtype), want_k = Tensor::Empty(kv_shape, dtype),
               want_v = Tensor::Empty(kv_shape, dtype);
  MoveColumns(qkv, 0, want_q, /*into_packed=*/false);
  MoveColumns(qkv, kQHeads * kHeadDim, want_k, false);
  MoveColumns(qkv, (kQHeads + kKvHeads) * kHeadDim, want_v, false);
  ops::Rope(want_q, table);
  ops::Rope(want_k, table);
  ExpectSameBits(q, want_q, "q");
  ExpectSameBits(k, want_k, "k");
  ExpectSameBits(v, want_v, "v");
}

TEST_P(QkvRopeTest, MergeIsRopeBackwardThenPacking) {
  const DType dtype = GetParam();
  const Shape q_shape = {kBatch, kSeq, kQHeads, kHeadDim},
              kv_shape = {kBatch, kSeq, kKvHeads, kHeadDim};
  const Tensor dq = RandomIn(q_shape, 7, dtype), dk = RandomIn(kv_shape, 8, dtype),
               dv = RandomIn(kv_shape, 9, dtype);
  const RopeTable table = MakeRopeTable(kSeq, kHeadDim, kTheta);
  const Shape packed_shape = {kBatch * kSeq, (kQHeads + 2 * kKvHeads) * kHeadDim};
  const Tensor dqkv = RandomIn(packed_shape, 10, dtype);  // overwritten
  ops::MergeQkvRopeBackward(dq, dk, dv, table, dqkv);

  const Tensor want = Tensor::Empty(packed_shape, dtype);
  const Tensor dq_back = dq.Clone(), dk_back = dk.Clone();
  ops::RopeBackward(dq_back, table);
  ops::RopeBackward(dk_back, table);
  MoveColumns(want, 0, dq_back, /*into_packed=*/true);
  MoveColumns(want, kQHeads * kHeadDim, dk_back, true);
  MoveColumns(want, (kQHeads + kKvHeads) * kHeadDim, dv, true);
  ExpectSameBits(dqkv, want, "dqkv");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QkvRopeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace tetra::cpu
