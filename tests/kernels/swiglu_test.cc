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

}  // namespace
}  // namespace tetra::cpu
