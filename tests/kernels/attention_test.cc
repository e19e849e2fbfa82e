#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

// Tolerances: |got - want| <= abs + rel * |want| against the double reference.
struct Tolerance {
  double abs, rel;
};
// Forward: fp32 dot products of <= 64 terms, softmax sums over <= 150 keys and
// a 1-ulp exp; measured errors stay below 1e-6.
constexpr Tolerance kForwardTol{5e-6, 5e-6};
// Scores of magnitude ~100 carry an fp32 round-off of ~1e-5 each, which moves
// the (nearly one-hot) probabilities and the lse by about that much; measured
// errors reach 3e-5.
constexpr Tolerance kLargeScoreTol{1e-4, 1e-6};
// Backward: gradients sum P * (dP - rowsum(dout * out)) over up to 150 keys,
// and dk, dv also over the query heads of a group; measured errors stay below
// 2e-6.
constexpr Tolerance kBackwardTol{1e-5, 1e-5};
// Finite differences of the fp32 forward: h = 1e-2 keeps the truncation error
// (h^2 / 6 times a third derivative of order 1) near 2e-5, and a perturbed key
// changes up to T * Hq/Hkv * D outputs whose fp32 round-off, divided by 2h,
// adds a few 1e-5 (measured: up to 2e-5 absolute on near-zero gradients).
constexpr testing::GradCheckOptions kGradCheck{
    .step = 1e-2, .rel_tol = 1e-2, .abs_tol = 1e-4, .max_checks = 48};

std::ostream& operator<<(std::ostream& os, const AttentionShape& s) {
  os << "B" << s.batch << "_T" << s.seq << "_Hq" << s.q_heads << "_Hkv" << s.kv_heads << "_D"
     << s.head_dim;
  if (s.v_head_dim != 0) os << "_Dv" << s.v_head_dim;
  return os;
}

int64_t QSize(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t KSize(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.head_dim; }
int64_t VSize(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.value_dim(); }
int64_t OutSize(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.value_dim(); }
int64_t LseSize(const AttentionShape& s) { return s.batch * s.q_heads * s.seq; }

struct Inputs {
  explicit Inputs(const AttentionShape& s, float q_scale = 1.0f)
      : q(testing::RandomVector(QSize(s), 1, q_scale)),
        k(testing::RandomVector(KSize(s), 2)),
        v(testing::RandomVector(VSize(s), 3)),
        probe(testing::RandomVector(OutSize(s), 4)) {}
  std::vector<float> q, k, v;
  std::vector<float> probe;  // dL/dout for L = sum(out * probe)
};

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

// Textbook attention in double: the full (T, T) score matrix of every head,
// the causal mask, softmax, repeat_kv, and its analytic backward for
// dout = probe (with the softmax backward written as p * (dp - sum(p * dp))).
// Scores are scaled by 1 / sqrt(D), the query/key head dim, also where the
// value head dim Dv differs, or by softmax_scale where it is given.
Result NaiveAttention(const AttentionShape& s, const Inputs& in) {
  const int64_t T = s.seq, D = s.head_dim, Dv = s.value_dim(), group = s.q_heads / s.kv_heads;
  const double scale =
      s.softmax_scale != 0 ? s.softmax_scale : 1.0 / std::sqrt(static_cast<double>(D));
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * s.q_heads + h) * D; };
  auto ki = [&](int64_t b, int64_t t, int64_t g) { return ((b * T + t) * s.kv_heads + g) * D; };
  auto vi = [&](int64_t b, int64_t t, int64_t g) { return ((b * T + t) * s.kv_heads + g) * Dv; };
  auto oi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * s.q_heads + h) * Dv; };
  Result r{std::vector<double>(OutSize(s)), std::vector<double>(LseSize(s)),
           std::vector<double>(QSize(s)), std::vector<double>(KSize(s)),
           std::vector<double>(VSize(s))};
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> p(T * T, 0.0);  // (query, key), zero above the diagonal
      for (int64_t t = 0; t < T; ++t) {
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) {
            dot += static_cast<double>(in.q[qi(b, t, h) + c]) * in.k[ki(b, j, g) + c];
          }
          p[t * T + j] = dot * scale;
          max_score = std::max(max_score, p[t * T + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(p[t * T + j] - max_score);
        for (int64_t j = 0; j <= t; ++j) p[t * T + j] = std::exp(p[t * T + j] - max_score) / sum;
        r.lse[(b * s.q_heads + h) * T + t] = max_score + std::log(sum);
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t c = 0; c < Dv; ++c) r.out[oi(b, t, h) + c] += p[t * T + j] * in.v[vi(b, j, g) + c];
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        const float* dout = &in.probe[oi(b, t, h)];
        std::vector<double> dp(t + 1);
        double p_dot_dp = 0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t c = 0; c < Dv; ++c) dp[j] += static_cast<double>(dout[c]) * in.v[vi(b, j, g) + c];
          p_dot_dp += p[t * T + j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = p[t * T + j] * (dp[j] - p_dot_dp) * scale;
          for (int64_t c = 0; c < Dv; ++c) r.dv[vi(b, j, g) + c] += p[t * T + j] * dout[c];
          for (int64_t c = 0; c < D; ++c) {
            r.dq[qi(b, t, h) + c] += ds * in.k[ki(b, j, g) + c];
            r.dk[ki(b, j, g) + c] += ds * in.q[qi(b, t, h) + c];
          }
        }
      }
    }
  }
  return r;
}

struct Grads {
  explicit Grads(const AttentionShape& s) : dq(QSize(s)), dk(KSize(s)), dv(VSize(s)) {}
  std::vector<float> dq, dk, dv;
};

struct Output {
  explicit Output(const AttentionShape& s) : out(OutSize(s)), lse(LseSize(s)) {}
  std::vector<float> out, lse;
};

Output Forward(const AttentionShape& s, const Inputs& in) {
  Output o(s);
  AttentionForward(s, in.q.data(), in.k.data(), in.v.data(), o.out.data(), o.lse.data());
  return o;
}

Grads Backward(const AttentionShape& s, const Inputs& in, const Output& o) {
  Grads g(s);
  // Poison the outputs: the backward must overwrite them, not add to them.
  for (auto* grad : {&g.dq, &g.dk, &g.dv}) std::fill(grad->begin(), grad->end(), 1e3f);
  AttentionBackward(s, in.probe.data(), in.q.data(), in.k.data(), in.v.data(), o.out.data(),
                    o.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
  return g;
}

void ExpectNear(const std::string& name, const std::vector<float>& got,
                const std::vector<double>& want, Tolerance tol) {
  ASSERT_EQ(got.size(), want.size()) << name;
  int failures = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::fabs(got[i] - want[i]);
    worst = std::max(worst, error);
    if (!(error <= tol.abs + tol.rel * std::fabs(want[i])) && failures++ < 5) {
      ADD_FAILURE() << name << "[" << i << "]: " << got[i] << " vs reference " << want[i];
    }
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << got.size()
                         << " elements differ, worst error " << worst;
}

class AttentionTest : public ::testing::TestWithParam<AttentionShape> {};

// Tiny shapes with one kv head per query head, two per kv head, and all four
// sharing one (multi-query); then value head dims below and above the
// query/key head dim, as MLA's (D 192, Dv 128); T < one tile.
INSTANTIATE_TEST_SUITE_P(Tiny, AttentionTest,
                         ::testing::Values(AttentionShape{2, 5, 4, 4, 8},
                                           AttentionShape{2, 7, 4, 2, 8},
                                           AttentionShape{2, 9, 4, 1, 8},
                                           AttentionShape{2, 7, 4, 2, 12, 8},
                                           AttentionShape{2, 6, 2, 1, 4, 12},
                                           // MLA's heads with YaRN's larger scale
                                           AttentionShape{2, 7, 2, 2, 12, 8, 0.45}),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

TEST_P(AttentionTest, ForwardMatchesNaiveReference) {
  const AttentionShape s = GetParam();
  const Inputs in(s);
  const Output o = Forward(s, in);
  const Result want = NaiveAttention(s, in);
  ExpectNear("out", o.out, want.out, kForwardTol);
  ExpectNear("lse", o.lse, want.lse, kForwardTol);
}

TEST_P(AttentionTest, BackwardMatchesNaiveReference) {
  const AttentionShape s = GetParam();
  const Inputs in(s);
  const Grads g = Backward(s, in, Forward(s, in));
  const Result want = NaiveAttention(s, in);
  ExpectNear("dq", g.dq, want.dq, kBackwardTol);
  ExpectNear("dk", g.dk, want.dk, kBackwardTol);
  ExpectNear("dv", g.dv, want.dv, kBackwardTol);
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const AttentionShape s = GetParam();
  Inputs in(s);
  const Grads g = Backward(s, in, Forward(s, in));
  auto loss = [&] { return testing::ProbeLoss(Forward(s, in).out.data(), in.probe); };
  testing::ExpectGradientMatches("dq", in.q.data(), QSize(s), g.dq.data(), loss, kGradCheck);
  testing::ExpectGradientMatches("dk", in.k.data(), KSize(s), g.dk.data(), loss, kGradCheck);
  testing::ExpectGradientMatches("dv", in.v.data(), VSize(s), g.dv.data(), loss, kGradCheck);
}

class AttentionTileEdgeTest : public AttentionTest {};

// T = 150 and 130 are longer than the 64-row query tile and not multiples of
// it; head dims 40 and 64 run the vectorised tile products with and without a
// scalar column tail, and D 48 with Dv 24 the value products apart from the
// score products.
INSTANTIATE_TEST_SUITE_P(Long, AttentionTileEdgeTest,
                         ::testing::Values(AttentionShape{1, 150, 4, 2, 40},
                                           AttentionShape{2, 130, 2, 1, 64},
                                           AttentionShape{1, 150, 4, 2, 48, 24}),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

TEST_P(AttentionTileEdgeTest, ForwardAndBackwardMatchNaiveReference) {
  const AttentionShape s = GetParam();
  const Inputs in(s);
  const Output o = Forward(s, in);
  const Grads g = Backward(s, in, o);
  const Result want = NaiveAttention(s, in);
  ExpectNear("out", o.out, want.out, kForwardTol);
  ExpectNear("lse", o.lse, want.lse, kForwardTol);
  ExpectNear("dq", g.dq, want.dq, kBackwardTol);
  ExpectNear("dk", g.dk, want.dk, kBackwardTol);
  ExpectNear("dv", g.dv, want.dv, kBackwardTol);
}

// Queries 50x larger give scores of magnitude ~100, whose exponentials
// overflow fp32 unless the row maximum is subtracted first.
TEST(AttentionStabilityTest, LargeScoresMatchNaiveReference) {
  const AttentionShape s{1, 70, 2, 1, 16};
  const Inputs in(s, /*q_scale=*/50.0f);
  const Output o = Forward(s, in);
  const Result want = NaiveAttention(s, in);
  ExpectNear("out", o.out, want.out, kLargeScoreTol);
  ExpectNear("lse", o.lse, want.lse, kLargeScoreTol);
}

// The backward sums several query heads and tiles into each dk/dv row; the
// order must not depend on the run or the thread count.
TEST(AttentionDeterminismTest, BackwardIsBitIdenticalAcrossRunsAndThreadCounts) {
  const AttentionShape s{2, 150, 4, 2, 40};
  const Inputs in(s);
  const int saved_threads = CpuThreads();
  SetCpuThreads(2);
  const Output o = Forward(s, in);
  const Grads first = Backward(s, in, o);
  const Grads second = Backward(s, in, o);
  SetCpuThreads(1);
  const Output o_serial = Forward(s, in);
  const Grads serial = Backward(s, in, o_serial);
  SetCpuThreads(saved_threads);
  EXPECT_EQ(o.out, o_serial.out);
  EXPECT_EQ(o.lse, o_serial.lse);
  for (const Grads* other : {&second, &serial}) {
    EXPECT_EQ(first.dq, other->dq);
    EXPECT_EQ(first.dk, other->dk);
    EXPECT_EQ(first.dv, other->dv);
  }
}

}  // namespace
}  // namespace tetra::cpu
