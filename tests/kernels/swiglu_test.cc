#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::ProbeLoss;
using ::tetra::testing::RandomVector;

struct Tolerances {
  double forward_rel;  // fp32 exp, divide and multiply vs double: a few ulps
  double forward_abs;  // for outputs that underflow towards 0 at very negative gates
  // SiLU is smooth with |silu'''| < 1: with h = 1e-2 the central-difference
  // truncation error is < 1e-4 relative; fp32 noise ~1e-5.
  ::tetra::testing::GradCheckOptions grad;
};
constexpr Tolerances kTol = {
    .forward_rel = 1e-6,
    .forward_abs = 1e-30,
    .grad = {.step = 1e-2, .rel_tol = 2e-3, .abs_tol = 2e-4, .max_checks = 1000}};

double SiluDouble(double g) { return g / (1.0 + std::exp(-g)); }

TEST(SwigluTest, ForwardMatchesDoubleFormulaIncludingSaturation) {
  std::vector<float> gate = RandomVector(40, 1, 3.0f);
  // Saturated gates: exp(-g) overflows or vanishes, silu(g) -> 0 or g.
  gate.insert(gate.end(), {-200.0f, -88.0f, -30.0f, 30.0f, 88.0f, 200.0f, 0.0f});
  const std::vector<float> up = RandomVector(gate.size(), 2);
  std::vector<float> out(gate.size());
  SwigluForward(gate.data(), up.data(), gate.size(), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double expected = SiluDouble(gate[i]) * up[i];
    EXPECT_NEAR(out[i], expected, kTol.forward_abs + kTol.forward_rel * std::fabs(expected))
        << "gate " << gate[i];
  }
}

TEST(SwigluTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = 48;
  std::vector<float> gate = RandomVector(n, 3, 2.5f);
  std::vector<float> up = RandomVector(n, 4);
  const std::vector<float> probe = RandomVector(n, 5);
  auto loss = [&] {
    std::vector<float> out(n);
    SwigluForward(gate.data(), up.data(), n, out.data());
    return ProbeLoss(out.data(), probe);
  };
  std::vector<float> dgate(n), dup(n);
  SwigluBackward(probe.data(), gate.data(), up.data(), n, dgate.data(), dup.data());
  ExpectGradientMatches("dgate", gate.data(), n, dgate.data(), loss, kTol.grad);
  ExpectGradientMatches("dup", up.data(), n, dup.data(), loss, kTol.grad);

  // The gradients may overwrite the inputs in place.
  std::vector<float> gate_buffer = gate, up_buffer = up;
  SwigluBackward(probe.data(), gate_buffer.data(), up_buffer.data(), n, gate_buffer.data(),
                 up_buffer.data());
  EXPECT_EQ(gate_buffer, dgate);
  EXPECT_EQ(up_buffer, dup);
}

// gate and up (rows, width) as the halves of each row of one (rows, 2 x width) buffer.
std::vector<float> Pack(const std::vector<float>& gate, const std::vector<float>& up, int64_t rows,
                        int64_t width) {
  std::vector<float> packed(2 * rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      packed[r * 2 * width + c] = gate[r * width + c];
      packed[r * 2 * width + width + c] = up[r * width + c];
    }
  }
  return packed;
}

// The packed ops run the separate ones' arithmetic: the same bits, at widths
// no vector divides and with enough rows that threads split rows between them.
TEST(SwigluTest, PackedEqualsSeparateBitForBit) {
  struct Dims {
    int64_t rows, width;
  };
  for (const Dims d : {Dims{3, 13}, Dims{300, 131}, Dims{2, 1}}) {
    const int64_t n = d.rows * d.width;
    std::vector<float> gate = RandomVector(n, 6, 4.0f);
    gate[0] = -200.0f;  // saturated: exp(-g) overflows
    gate[n - 1] = 90.0f;
    const std::vector<float> up = RandomVector(n, 7), dout = RandomVector(n, 8);
    std::vector<float> gate_up = Pack(gate, up, d.rows, d.width);

    std::vector<float> out(n), packed_out(n);
    SwigluForward(gate.data(), up.data(), n, out.data());
    SwigluPackedForward(gate_up.data(), d.rows, d.width, packed_out.data());
    EXPECT_EQ(packed_out, out) << d.rows << "x" << d.width;

    std::vector<float> dgate(n), dup(n), dgate_up(2 * n);
    SwigluBackward(dout.data(), gate.data(), up.data(), n, dgate.data(), dup.data());
    SwigluPackedBackward(dout.data(), gate_up.data(), d.rows, d.width, dgate_up.data());
    EXPECT_EQ(dgate_up, Pack(dgate, dup, d.rows, d.width)) << d.rows << "x" << d.width;

    // In place over gate_up.
    SwigluPackedBackward(dout.data(), gate_up.data(), d.rows, d.width, gate_up.data());
    EXPECT_EQ(gate_up, dgate_up) << d.rows << "x" << d.width << " in place";
  }
}

}  // namespace
}  // namespace tetra::cpu
