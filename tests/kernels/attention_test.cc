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
  os << "B" << s.batch << "_T" << s.seq;
  if (s.kv_seq != 0) os << "_Tk" << s.kv_seq;
  os << "_Hq" << s.q_heads << "_Hkv" << s.kv_heads << "_D" << s.head_dim;
  if (s.v_head_dim != 0) os << "_Dv" << s.v_head_dim;
  if (!s.causal) os << "_unmasked";
  return os;
}

int64_t QSize(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t KSize(const AttentionShape& s) { return s.batch * s.keys() * s.kv_heads * s.head_dim; }
int64_t VSize(const AttentionShape& s) { return s.batch * s.keys() * s.kv_heads * s.value_dim(); }
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

// Textbook attention in double: the full (T, Tk) score matrix of every head,
// the causal mask (when causal), softmax, repeat_kv, and its analytic
// backward for dout = probe (with the softmax backward written as
// p * (dp - sum(p * dp))). Scores are scaled by 1 / sqrt(D), the query/key
// head dim, also where the value head dim Dv differs, or by softmax_scale
// where it is given.
Result NaiveAttention(const AttentionShape& s, const Inputs& in) {
  const int64_t T = s.seq, Tk = s.keys(), D = s.head_dim, Dv = s.value_dim();
  const int64_t group = s.q_heads / s.kv_heads;
  const double scale =
      s.softmax_scale != 0 ? s.softmax_scale : 1.0 / std::sqrt(static_cast<double>(D));
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * s.q_heads + h) * D; };
  auto ki = [&](int64_t b, int64_t j, int64_t g) { return ((b * Tk + j) * s.kv_heads + g) * D; };
  auto vi = [&](int64_t b, int64_t j, int64_t g) { return ((b * Tk + j) * s.kv_heads + g) * Dv; };
  auto oi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * s.q_heads + h) * Dv; };
  // Query t sees keys [0, seen(t)).
  auto seen = [&](int64_t t) { return s.causal ? t + 1 : Tk; };
  Result r{std::vector<double>(OutSize(s)), std::vector<double>(LseSize(s)),
           std::vector<double>(QSize(s)), std::vector<double>(KSize(s)),
           std::vector<double>(VSize(s))};
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> p(T * Tk, 0.0);  // (query, key), zero where masked
      for (int64_t t = 0; t < T; ++t) {
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < seen(t); ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) {
            dot += static_cast<double>(in.q[qi(b, t, h) + c]) * in.k[ki(b, j, g) + c];
          }
          p[t * Tk + j] = dot * scale;
          max_score = std::max(max_score, p[t * Tk + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < seen(t); ++j) sum += std::exp(p[t * Tk + j] - max_score);
        for (int64_t j = 0; j < seen(t); ++j)
          p[t * Tk + j] = std::exp(p[t * Tk + j] - max_score) / sum;
        r.lse[(b * s.q_heads + h) * T + t] = max_score + std::log(sum);
        for (int64_t j = 0; j < seen(t); ++j) {
          for (int64_t c = 0; c < Dv; ++c)
            r.out[oi(b, t, h) + c] += p[t * Tk + j] * in.v[vi(b, j, g) + c];
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        const float* dout = &in.probe[oi(b, t, h)];
        std::vector<double> dp(seen(t));
        double p_dot_dp = 0;
        for (int64_t j = 0; j < seen(t); ++j) {
          for (int64_t c = 0; c < Dv; ++c)
            dp[j] += static_cast<double>(dout[c]) * in.v[vi(b, j, g) + c];
          p_dot_dp += p[t * Tk + j] * dp[j];
        }
        for (int64_t j = 0; j < seen(t); ++j) {
          const double ds = p[t * Tk + j] * (dp[j] - p_dot_dp) * scale;
          for (int64_t c = 0; c < Dv; ++c) r.dv[vi(b, j, g) + c] += p[t * Tk + j] * dout[c];
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

// Without the mask, over keys of a length of their own (ring attention's
// blocks): more and fewer keys than queries, GQA and multi-query, Dv below
// and above D, as many keys as queries; then T = 70 queries (two tiles) over
// 100 keys, more than a tile and not a multiple of one.
INSTANTIATE_TEST_SUITE_P(Unmasked, AttentionTest,
                         ::testing::Values(AttentionShape{.batch = 2,
                                                          .seq = 5,
                                                          .q_heads = 4,
                                                          .kv_heads = 2,
                                                          .head_dim = 8,
                                                          .kv_seq = 9,
                                                          .causal = false},
                                           AttentionShape{.batch = 2,
                                                          .seq = 7,
                                                          .q_heads = 4,
                                                          .kv_heads = 1,
                                                          .head_dim = 12,
                                                          .v_head_dim = 8,
                                                          .kv_seq = 3,
                                                          .causal = false},
                                           AttentionShape{.batch = 2,
                                                          .seq = 6,
                                                          .q_heads = 2,
                                                          .kv_heads = 1,
                                                          .head_dim = 4,
                                                          .v_head_dim = 12,
                                                          .kv_seq = 11,
                                                          .causal = false},
                                           AttentionShape{.batch = 2,
                                                          .seq = 9,
                                                          .q_heads = 2,
                                                          .kv_heads = 2,
                                                          .head_dim = 8,
                                                          .causal = false},
                                           AttentionShape{.batch = 1,
                                                          .seq = 70,
                                                          .q_heads = 4,
                                                          .kv_heads = 2,
                                                          .head_dim = 12,
                                                          .v_head_dim = 8,
                                                          .kv_seq = 100,
                                                          .causal = false}),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

class AttentionTileEdgeTest : public AttentionTest {};

// T = 150 and 130 are longer than the 64-row query tile and not multiples of
// it; head dims 40 and 64 run the vectorised tile products with and without a
// scalar column tail, and D 48 with Dv 24 the value products apart from the
// score products. Unmasked: 150 queries over 130 keys, and 40 over 200.
INSTANTIATE_TEST_SUITE_P(Long, AttentionTileEdgeTest,
                         ::testing::Values(AttentionShape{1, 150, 4, 2, 40},
                                           AttentionShape{2, 130, 2, 1, 64},
                                           AttentionShape{1, 150, 4, 2, 48, 24},
                                           AttentionShape{.batch = 1,
                                                          .seq = 150,
                                                          .q_heads = 4,
                                                          .kv_heads = 2,
                                                          .head_dim = 40,
                                                          .kv_seq = 130,
                                                          .causal = false},
                                           AttentionShape{.batch = 2,
                                                          .seq = 40,
                                                          .q_heads = 2,
                                                          .kv_heads = 1,
                                                          .head_dim = 48,
                                                          .v_head_dim = 24,
                                                          .kv_seq = 200,
                                                          .causal = false}),
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
// order must not depend on the run or the thread count, masked or not.
TEST(AttentionDeterminismTest, BackwardIsBitIdenticalAcrossRunsAndThreadCounts) {
  for (const AttentionShape& s : {AttentionShape{2, 150, 4, 2, 40}, AttentionShape{.batch = 2,
                                                                    .seq = 150,
                                                                    .q_heads = 4,
                                                                    .kv_heads = 2,
                                                                    .head_dim = 40,
                                                                    .kv_seq = 90,
                                                                    .causal = false}}) {
    std::ostringstream name;
    name << s;
    SCOPED_TRACE(name.str());
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
}

// Steps [begin, begin + len) of each of the `rows` sequences of x (rows, seq,
// width) as (rows, len, width): a chunk of q, k, v, out or their gradients
// (rows = B, width = H x D), or of the lse (rows = B x Hq, width 1).
std::vector<float> Steps(const std::vector<float>& x, int64_t rows, int64_t seq, int64_t width,
                         int64_t begin, int64_t len) {
  std::vector<float> part;
  part.reserve(rows * len * width);
  for (int64_t r = 0; r < rows; ++r) {
    const auto first = x.begin() + (r * seq + begin) * width;
    part.insert(part.end(), first, first + len * width);
  }
  return part;
}

std::vector<float> Sum(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

void ExpectClose(const std::string& name, const std::vector<float>& got,
                 const std::vector<float>& want, Tolerance tol) {
  ExpectNear(name, got, std::vector<double>(want.begin(), want.end()), tol);
}

// Ring attention's arithmetic on one rank: causal attention of a sequence
// split at `split` into chunks 1 and 2 is, for chunk 1's queries, causal
// attention of chunk 1; for chunk 2's, the merge of chunk 2's queries over
// chunk 1's keys (unmasked) and chunk 2's causal attention of itself. The
// backward of each block, given the merged out and lse, is that block's
// share of the gradients: dq of chunk 2 sums two blocks, dk and dv of chunk
// 1 too. Against the one-piece kernels: fp32 sums over the keys in two
// parts instead of one and the merge's exp/log1p move outputs and gradients
// of order 1 by a few ulps (measured: up to 7e-7, and 2 ulps, 9.5e-7, of
// an lse near 5).
constexpr Tolerance kRingTol{1e-6, 1e-6};

void ExpectRingBlocksMatchWholeAttention(const AttentionShape& whole, int64_t split) {
  const int64_t B = whole.batch, T = whole.seq, H = whole.q_heads;
  const int64_t q_width = H * whole.head_dim, k_width = whole.kv_heads * whole.head_dim;
  const int64_t v_width = whole.kv_heads * whole.value_dim(), out_width = H * whole.value_dim();
  const int64_t n1 = split, n2 = T - split;
  const Inputs in(whole);
  const Output full = Forward(whole, in);
  const Grads full_grads = Backward(whole, in, full);

  // Chunk c's part of q, k, v and the probe, and a block's inputs.
  auto chunk = [&](int c, const std::vector<float>& x, int64_t width) {
    return c == 1 ? Steps(x, B, T, width, 0, n1) : Steps(x, B, T, width, n1, n2);
  };
  auto block = [&](int query_chunk, int key_chunk) {
    Inputs b = in;
    b.q = chunk(query_chunk, in.q, q_width);
    b.probe = chunk(query_chunk, in.probe, out_width);
    b.k = chunk(key_chunk, in.k, k_width);
    b.v = chunk(key_chunk, in.v, v_width);
    return b;
  };
  AttentionShape causal1 = whole, causal2 = whole, cross = whole;
  causal1.seq = n1;
  causal2.seq = n2;
  cross.seq = n2;
  cross.kv_seq = n1;
  cross.causal = false;
  const Inputs in11 = block(1, 1), in22 = block(2, 2), in21 = block(2, 1);

  // Forward: chunk 1 alone; chunk 2 = merge(2 over 1, 2 over 2).
  const Output out11 = Forward(causal1, in11);
  Output merged = Forward(cross, in21);
  const Output out22 = Forward(causal2, in22);
  AttentionMerge(B, n2, H, whole.value_dim(), out22.out.data(), out22.lse.data(), merged.out.data(),
                 merged.lse.data());
  ExpectClose("out, chunk 1", out11.out, chunk(1, full.out, out_width), kRingTol);
  ExpectClose("lse, chunk 1", out11.lse, Steps(full.lse, B * H, T, 1, 0, n1), kRingTol);
  ExpectClose("out, chunk 2", merged.out, chunk(2, full.out, out_width), kRingTol);
  ExpectClose("lse, chunk 2", merged.lse, Steps(full.lse, B * H, T, 1, n1, n2), kRingTol);

  // Backward: every block with its queries' final out and lse.
  const Grads g11 = Backward(causal1, in11, out11);
  const Grads g21 = Backward(cross, in21, merged);
  const Grads g22 = Backward(causal2, in22, merged);
  ExpectClose("dq, chunk 1", g11.dq, chunk(1, full_grads.dq, q_width), kRingTol);
  ExpectClose("dq, chunk 2", Sum(g21.dq, g22.dq), chunk(2, full_grads.dq, q_width), kRingTol);
  ExpectClose("dk, chunk 1", Sum(g11.dk, g21.dk), chunk(1, full_grads.dk, k_width), kRingTol);
  ExpectClose("dk, chunk 2", g22.dk, chunk(2, full_grads.dk, k_width), kRingTol);
  ExpectClose("dv, chunk 1", Sum(g11.dv, g21.dv), chunk(1, full_grads.dv, v_width), kRingTol);
  ExpectClose("dv, chunk 2", g22.dv, chunk(2, full_grads.dv, v_width), kRingTol);
}

// 2S = 140 tokens in halves of S = 70 (over a tile, not a multiple of one),
// GQA with Dv != D.
TEST(AttentionRingTest, HalvesMergedMatchWholeCausalAttention) {
  ExpectRingBlocksMatchWholeAttention(
      {.batch = 2, .seq = 140, .q_heads = 4, .kv_heads = 2, .head_dim = 24, .v_head_dim = 16}, 70);
}

// Uneven chunks: 50 queries over 100 earlier keys.
TEST(AttentionRingTest, UnevenChunksMergedMatchWholeCausalAttention) {
  ExpectRingBlocksMatchWholeAttention(
      {.batch = 1, .seq = 150, .q_heads = 2, .kv_heads = 1, .head_dim = 40}, 100);
}

TEST(AttentionShapeTest, CausalWithOtherKeysIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const AttentionShape s{
      .batch = 1, .seq = 4, .q_heads = 1, .kv_heads = 1, .head_dim = 4, .kv_seq = 6};
  const Inputs in(s);
  std::vector<float> out(OutSize(s)), lse(LseSize(s));
  EXPECT_DEATH(AttentionForward(s, in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data()),
               "causal mask needs as many keys as queries");
}

// AttentionMerge against logaddexp in double. Rows: random lse's of spread 3;
// one pair (100, 99.5) whose exp overflows fp32 unless the max comes out
// first; sides without keys (-inf) whose out holds NaN; a row with neither.
TEST(AttentionMergeTest, MatchesADirectComputation) {
  constexpr int64_t B = 2, T = 5, H = 3, Dv = 7;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out = testing::RandomVector(B * T * H * Dv, 11);
  const std::vector<float> part_out = [&] {
    std::vector<float> p = testing::RandomVector(B * T * H * Dv, 12);
    std::fill_n(p.begin() + ((1 * T + 4) * H + 2) * Dv, Dv, kNaN);  // b 1, t 4, h 2
    return p;
  }();
  std::vector<float> lse = testing::RandomVector(B * H * T, 13, 3.0f);
  std::vector<float> part_lse = testing::RandomVector(B * H * T, 14, 3.0f);
  auto lse_at = [&](int64_t b, int64_t t, int64_t h) { return (b * H + h) * T + t; };
  lse[lse_at(0, 0, 0)] = part_lse[lse_at(0, 0, 0)] = -kInf;  // neither side has keys
  lse[lse_at(0, 2, 1)] = -kInf;                              // out has none
  std::fill_n(out.begin() + ((0 * T + 2) * H + 1) * Dv, Dv, kNaN);
  part_lse[lse_at(1, 4, 2)] = -kInf;  // part_out has none (NaN above)
  lse[lse_at(1, 1, 0)] = 100.0f;
  part_lse[lse_at(1, 1, 0)] = 99.5f;

  const std::vector<float> out_before = out, lse_before = lse;
  AttentionMerge(B, T, H, Dv, part_out.data(), part_lse.data(), out.data(), lse.data());

  std::vector<double> want_out(out.size()), want_lse(lse.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = lse_at(b, t, h), row = ((b * T + t) * H + h) * Dv;
        const double a = lse_before[at], p = part_lse[at];
        if (a == -kInf && p == -kInf) {
          want_lse[at] = -kInf;
          for (int64_t c = 0; c < Dv; ++c) want_out[row + c] = out_before[row + c];
          continue;
        }
        const double m = std::max(a, p);
        const double merged = m + std::log(std::exp(a - m) + std::exp(p - m));
        want_lse[at] = merged;
        for (int64_t c = 0; c < Dv; ++c) {
          want_out[row + c] = (a == -kInf ? 0.0 : std::exp(a - merged) * out_before[row + c]) +
                              (p == -kInf ? 0.0 : std::exp(p - merged) * part_out[row + c]);
        }
      }
    }
  }
  // The row with neither side (b 0, t 0, h 0): lse still -inf, out bit for
  // bit as it was.
  EXPECT_EQ(lse[lse_at(0, 0, 0)], -kInf);
  for (int64_t c = 0; c < Dv; ++c) EXPECT_EQ(out[c], out_before[c]);
  want_lse[lse_at(0, 0, 0)] = lse[lse_at(0, 0, 0)] = 0;  // compared; ExpectNear takes numbers
  // A few fp32 operations per element on values of order 1 (lse of order 100
  // in one row: relative).
  ExpectNear("out", out, want_out, {1e-6, 1e-6});
  ExpectNear("lse", lse, want_lse, {1e-6, 1e-6});
}

}  // namespace
}  // namespace tetra::cpu
