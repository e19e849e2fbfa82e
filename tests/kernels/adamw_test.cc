#include "kernels/cpu/adamw.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::RandomVector;

// fp32 state vs a double re-implementation, relative to the magnitude of the
// terms each value sums (not to the value, which may cancel to ~0): every step
// adds a few ulps (~2e-7) of that magnitude, so five steps stay within 1e-6.
constexpr double kRelTol = 1e-6;

// torch.optim.AdamW's single-tensor update, written out in double, with the
// running magnitude |terms| of each state value as the tolerance scale.
struct ReferenceAdamW {
  std::vector<double> param, m, v;
  std::vector<double> param_scale, m_scale;  // v sums non-negative terms: v is its scale

  explicit ReferenceAdamW(const std::vector<float>& initial)
      : param(initial.begin(), initial.end()),
        m(initial.size(), 0.0),
        v(initial.size(), 0.0),
        param_scale(initial.size()),
        m_scale(initial.size(), 0.0) {
    for (size_t i = 0; i < initial.size(); ++i) param_scale[i] = std::fabs(initial[i]);
  }

  void Step(const std::vector<float>& grad, const AdamWHyper& h) {
    const double bias_correction1 = 1 - std::pow(h.beta1, h.step);
    const double bias_correction2 = 1 - std::pow(h.beta2, h.step);
    for (size_t i = 0; i < param.size(); ++i) {
      const double g = grad[i];
      param[i] *= 1 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + h.eps;
      const double update = h.lr / bias_correction1 * m[i] / denom;
      param[i] -= update;
      m_scale[i] = h.beta1 * m_scale[i] + (1 - h.beta1) * std::fabs(g);
      param_scale[i] = param_scale[i] * (1 - h.lr * h.weight_decay) + std::fabs(update);
    }
  }
};

void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected,
                 const std::vector<double>& scale, const char* name, int64_t step) {
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::fabs(actual[i] - expected[i]) > kRelTol * scale[i] && failures++ < 5) {
      ADD_FAILURE() << name << "[" << i << "] at step " << step << ": " << actual[i] << " vs "
                    << expected[i] << " (term magnitude " << scale[i] << ")";
    }
  }
  EXPECT_EQ(failures, 0) << name << " at step " << step;
}

void RunSteps(double weight_decay, int64_t n) {
  std::vector<float> param = RandomVector(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  ReferenceAdamW reference(param);
  AdamWHyper h{.lr = 1e-2,
               .beta1 = 0.9,
               .beta2 = 0.95,
               .eps = 1e-8,
               .weight_decay = weight_decay,
               .step = 0};
  for (h.step = 1; h.step <= 5; ++h.step) {
    const std::vector<float> grad = RandomVector(n, 10 + h.step, 0.5f);
    AdamWUpdate(param.data(), grad.data(), m.data(), v.data(), n, h);
    reference.Step(grad, h);
    ExpectClose(param, reference.param, reference.param_scale, "param", h.step);
    ExpectClose(m, reference.m, reference.m_scale, "m", h.step);
    ExpectClose(v, reference.v, reference.v, "v", h.step);
  }
}

TEST(AdamWTest, MatchesTorchFormulaWithoutWeightDecay) { RunSteps(0.0, 1000); }

TEST(AdamWTest, MatchesTorchFormulaWithWeightDecay) { RunSteps(0.1, 1000); }

TEST(AdamWTest, MatchesTorchFormulaOnThreadedSizes) { RunSteps(0.1, 70001); }

TEST(AdamWTest, FirstStepMovesEachParameterByLrAgainstTheGradientSign) {
  // At step 1, m / sqrt(v) after bias correction is g / |g|: the update is
  // -lr * sign(g) (up to eps), whatever the gradient's magnitude.
  std::vector<float> param = {1.0f, -2.0f, 0.5f};
  const std::vector<float> grad = {3.0f, -1e-3f, 200.0f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  AdamWUpdate(
      param.data(), grad.data(), m.data(), v.data(), 3,
      {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0, .step = 1});
  EXPECT_NEAR(param[0], 0.9f, 1e-6);
  EXPECT_NEAR(param[1], -1.9f, 1e-5);  // |g| = 1e-3: eps matters at 1e-5 relative
  EXPECT_NEAR(param[2], 0.4f, 1e-6);
}

}  // namespace
}  // namespace tetra::cpu
