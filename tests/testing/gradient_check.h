// Finite-difference gradient checks shared by the kernel, layer and model tests.
//
// The usual pattern: the scalar loss is L = sum(out * probe) in double, with a
// fixed random `probe`, so dL/dout = probe feeds the backward pass under test;
// then every analytic input gradient is compared with central differences
// (L(x + h) - L(x - h)) / 2h at sampled elements.
#ifndef TETRA_TESTS_TESTING_GRADIENT_CHECK_H_
#define TETRA_TESTS_TESTING_GRADIENT_CHECK_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/philox.h"
#include "gtest/gtest.h"

namespace tetra::testing {

struct GradCheckOptions {
  double step = 1e-2;     // central-difference step h
  double rel_tol = 1e-2;  // |analytic - numeric| <= abs_tol + rel_tol * |numeric|
  double abs_tol = 1e-4;
  int max_checks = 48;  // sampled elements per tensor (all when fewer)
};

// Fills `n` floats with N(0, scale^2) drawn from (seed, stream).
inline std::vector<float> RandomVector(int64_t n, uint64_t stream, float scale = 1.0f,
                                       uint64_t seed = 7) {
  CounterRng rng(seed, stream);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.Normal(i));
  return v;
}

// sum(out * probe) in double.
inline double ProbeLoss(const float* out, const std::vector<float>& probe) {
  double s = 0;
  for (size_t i = 0; i < probe.size(); ++i) s += static_cast<double>(out[i]) * probe[i];
  return s;
}

// Compares analytic[i] with the central difference of `loss` in x[i], for up
// to max_checks indices spread over [0, n). `loss` must recompute the forward
// pass from the current contents of x.
inline void ExpectGradientMatches(const std::string& name, float* x, int64_t n,
                                  const float* analytic, const std::function<double()>& loss,
                                  const GradCheckOptions& options = {}) {
  int64_t checks = std::min<int64_t>(n, options.max_checks);
  int failures = 0;
  for (int64_t c = 0; c < checks; ++c) {
    int64_t i = checks == n ? c : (c * 7919 + 13) % n;
    float saved = x[i];
    x[i] = saved + static_cast<float>(options.step);
    double plus = loss();
    x[i] = saved - static_cast<float>(options.step);
    double minus = loss();
    x[i] = saved;
    // Divide by the step actually taken after fp32 rounding of x +- h.
    double taken = (static_cast<double>(saved + static_cast<float>(options.step)) -
                    static_cast<double>(saved - static_cast<float>(options.step)));
    double numeric = (plus - minus) / taken;
    double error = std::fabs(analytic[i] - numeric);
    if (error > options.abs_tol + options.rel_tol * std::fabs(numeric) && failures++ < 5) {
      ADD_FAILURE() << name << "[" << i << "]: analytic " << analytic[i] << " vs numeric "
                    << numeric << " (error " << error << ")";
    }
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << checks << " elements differ";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_GRADIENT_CHECK_H_
