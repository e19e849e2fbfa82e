// The synthetic Markov source: its stationary distribution and loss floor
// re-derived here by other methods (a dense linear solve, the chain rule over
// enumerated blocks, Monte-Carlo over the generated stream), determinism, and
// the non-triviality errors.
#include "data/synthetic_source.h"

#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using Block = std::vector<int32_t>;

struct Tolerances {
  // Power iteration stopped at an L1 step of 1e-12 against a direct solve:
  // both agree to ~1e-11 on these well-mixing chains; 1e-9 leaves room for
  // round-off in the entropy sums.
  double exact = 1e-9;
  // pi P - pi is the power iteration's last step, below 1e-12 by construction.
  double stationary = 1e-10;
  double probability_sum = 1e-12;  // a normalised Dirichlet draw, round-off only
  // Monte-Carlo comparisons, in standard errors; a fixed seed makes them
  // deterministic, these bounds only say how unlikely a false alarm would be.
  double floor_sigmas = 3;
  double frequency_sigmas = 4;  // 4: many (context, token) pairs are compared
};
constexpr Tolerances kTol;

SyntheticConfig Config(int order, int branching, double concentration, int64_t num_tokens) {
  SyntheticConfig config;
  config.set_order(order);
  config.set_branching(branching);
  config.set_concentration(concentration);
  config.set_num_tokens(num_tokens);
  return config;
}

std::unique_ptr<SyntheticSource> MakeSource(const SyntheticConfig& config, int64_t vocab,
                                            uint64_t seed, int64_t seq_length) {
  auto source = SyntheticSource::Create(config, vocab, seed, seq_length);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(source).value() : nullptr;
}

std::vector<int32_t> AllTokens(const TokenStream& stream) {
  std::vector<int32_t> tokens(stream.size());
  EXPECT_TRUE(stream.Read(0, stream.size(), tokens.data()).ok());
  return tokens;
}

double Entropy(const std::map<Block, double>& distribution) {
  double h = 0;
  for (const auto& [block, p] : distribution) {
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

// The chain as the test sees it through Probability(): the contexts reachable
// from `start` and the dense transition matrix between them.
struct DenseChain {
  std::vector<Block> contexts;
  std::map<Block, int> index;
  std::vector<std::vector<double>> transition;  // (contexts, contexts)
};

DenseChain Explore(const SyntheticSource& source, const Block& start) {
  DenseChain chain;
  chain.index[start] = 0;
  chain.contexts.push_back(start);
  for (size_t i = 0; i < chain.contexts.size(); ++i) {
    for (int32_t y = 0; y < source.vocab_size(); ++y) {
      if (source.Probability(chain.contexts[i], y) <= 0) continue;
      Block next(chain.contexts[i].begin() + 1, chain.contexts[i].end());
      next.push_back(y);
      if (chain.index.emplace(next, static_cast<int>(chain.contexts.size())).second) {
        chain.contexts.push_back(next);
      }
    }
  }
  const size_t n = chain.contexts.size();
  chain.transition.assign(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i) {
    for (int32_t y = 0; y < source.vocab_size(); ++y) {
      double p = source.Probability(chain.contexts[i], y);
      if (p <= 0) continue;
      Block next(chain.contexts[i].begin() + 1, chain.contexts[i].end());
      next.push_back(y);
      chain.transition[i][chain.index.at(next)] += p;
    }
  }
  return chain;
}

// Solves pi (P - I) = 0, sum pi = 1 by Gaussian elimination with partial
// pivoting (the last balance equation replaced by the normalisation).
std::vector<double> SolveStationary(const std::vector<std::vector<double>>& p) {
  const size_t n = p.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t row = 0; row < n; ++row) {
    for (size_t col = 0; col < n; ++col) a[row][col] = p[col][row] - (row == col ? 1.0 : 0.0);
  }
  for (size_t col = 0; col <= n; ++col) a[n - 1][col] = 1.0;
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row][col]) > std::abs(a[pivot][col])) pivot = row;
    }
    std::swap(a[col], a[pivot]);
    for (size_t row = 0; row < n; ++row) {
      if (row == col) continue;
      double factor = a[row][col] / a[col][col];
      for (size_t k = col; k <= n; ++k) a[row][k] -= factor * a[col][k];
    }
  }
  std::vector<double> pi(n);
  for (size_t i = 0; i < n; ++i) pi[i] = a[i][n] / a[i][i];
  return pi;
}

// Distribution of every m-token block of the stationary process: marginals of
// pi for m <= order, pi extended through the transition probabilities beyond.
std::map<Block, double> BlockDistribution(const SyntheticSource& source, const DenseChain& chain,
                                          const std::vector<double>& pi, int m) {
  const int k = source.order();
  std::map<Block, double> blocks;
  std::function<void(Block&, double)> extend = [&](Block& block, double p) {
    if (static_cast<int>(block.size()) == m) {
      blocks[block] += p;
      return;
    }
    for (int32_t y = 0; y < source.vocab_size(); ++y) {
      double q = source.Probability(Block(block.end() - k, block.end()), y);
      if (q <= 0) continue;
      block.push_back(y);
      extend(block, p * q);
      block.pop_back();
    }
  };
  for (size_t i = 0; i < chain.contexts.size(); ++i) {
    Block block(chain.contexts[i].begin(), chain.contexts[i].begin() + std::min(m, k));
    extend(block, pi[i]);
  }
  return blocks;
}

// Checks the source's pi, entropy rate and floors against a dense solve and
// the chain rule: the floor over T targets is (H(X_0..X_T) - H(X_0)) / T.
void CheckAgainstIndependentDerivation(const SyntheticConfig& config, int64_t vocab,
                                       uint64_t seed) {
  auto source = MakeSource(config, vocab, seed, /*seq_length=*/8);
  ASSERT_NE(source, nullptr);
  const int k = source->order();
  const std::vector<int32_t> tokens = AllTokens(*source);
  DenseChain chain = Explore(*source, Block(tokens.begin(), tokens.begin() + k));

  // Every context: exactly `branching` candidates whose probabilities sum to 1.
  for (const Block& context : chain.contexts) {
    double sum = 0;
    int candidates = 0;
    for (int32_t y = 0; y < vocab; ++y) {
      double p = source->Probability(context, y);
      sum += p;
      candidates += p > 0;
    }
    EXPECT_NEAR(sum, 1.0, kTol.probability_sum);
    EXPECT_EQ(candidates, config.branching());
  }

  const std::vector<double> pi = SolveStationary(chain.transition);
  ASSERT_EQ(source->num_contexts(), static_cast<int64_t>(chain.contexts.size()));
  for (int64_t i = 0; i < source->num_contexts(); ++i) {
    auto tokens_i = source->ContextTokens(i);
    int j = chain.index.at(Block(tokens_i.begin(), tokens_i.end()));
    EXPECT_NEAR(source->StationaryProbability(i), pi[j], kTol.exact);
  }

  double entropy_rate = 0;
  for (size_t i = 0; i < chain.contexts.size(); ++i) {
    for (double p : chain.transition[i]) {
      if (p > 0) entropy_rate -= pi[i] * p * std::log(p);
    }
  }
  EXPECT_NEAR(source->EntropyRate(), entropy_rate, kTol.exact);

  const double h1 = Entropy(BlockDistribution(*source, chain, pi, 1));
  for (int t = 1; t <= 4; ++t) {
    const double h_block = Entropy(BlockDistribution(*source, chain, pi, t + 1));
    EXPECT_NEAR(source->LossFloor(t), (h_block - h1) / t, kTol.exact) << "T = " << t;
  }
  // Long samples: the block entropy grows by the entropy rate per token.
  const double h_k = Entropy(BlockDistribution(*source, chain, pi, k));
  const int t = 64;
  EXPECT_NEAR(source->LossFloor(t), (h_k + (t + 1 - k) * entropy_rate - h1) / t, kTol.exact);
}

TEST(SyntheticSourceTest, OrderTwoMatchesADenseSolveAndTheChainRule) {
  CheckAgainstIndependentDerivation(Config(2, 3, 0.7, 1000), /*vocab=*/12, /*seed=*/1);
}

TEST(SyntheticSourceTest, OrderThreeMatchesADenseSolveAndTheChainRule) {
  CheckAgainstIndependentDerivation(Config(3, 2, 5.0, 1000), /*vocab=*/8, /*seed=*/1);
}

TEST(SyntheticSourceTest, StationaryDistributionIsStationary) {
  auto source = MakeSource(Config(2, 4, 1.0, 1000), 16, 3, 16);
  ASSERT_NE(source, nullptr);
  std::map<Block, int64_t> index;
  for (int64_t i = 0; i < source->num_contexts(); ++i) {
    auto tokens = source->ContextTokens(i);
    index[Block(tokens.begin(), tokens.end())] = i;
  }
  std::vector<double> stepped(source->num_contexts(), 0.0);
  double total = 0;
  for (int64_t i = 0; i < source->num_contexts(); ++i) {
    auto tokens = source->ContextTokens(i);
    const double pi = source->StationaryProbability(i);
    total += pi;
    for (int32_t y = 0; y < source->vocab_size(); ++y) {
      const double p = source->Probability(tokens, y);
      if (p <= 0) continue;
      Block next = {tokens[1], y};
      ASSERT_TRUE(index.count(next)) << "the class is closed";
      stepped[index[next]] += pi * p;
    }
  }
  EXPECT_NEAR(total, 1.0, kTol.stationary);
  for (int64_t i = 0; i < source->num_contexts(); ++i) {
    EXPECT_NEAR(stepped[i], source->StationaryProbability(i), kTol.stationary);
  }
}

TEST(SyntheticSourceTest, StreamMatchesTheFloorAndTheTransitionProbabilities) {
  const int64_t seq_length = 16;
  auto source = MakeSource(Config(2, 4, 1.0, 1 << 18), 16, 3, seq_length);
  ASSERT_NE(source, nullptr);
  const std::vector<int32_t> tokens = AllTokens(*source);
  ASSERT_EQ(tokens.size(), 1u << 18);

  // Monte-Carlo floor: the true model's mean loss over each sample's targets,
  // seeing only that sample's earlier tokens. Samples are the units of the
  // standard error (positions inside one are correlated).
  const int64_t num_samples = (source->size() - 1) / seq_length;
  double sum = 0, sum_sq = 0;
  for (int64_t s = 0; s < num_samples; ++s) {
    const int32_t* sample = tokens.data() + s * seq_length;
    double loss = 0;
    for (int64_t j = 0; j < seq_length; ++j) {
      const double p = source->Probability(absl::MakeConstSpan(sample, j + 1), sample[j + 1]);
      ASSERT_GT(p, 0) << "the stream took a transition the chain does not have";
      loss -= std::log(p);
    }
    loss /= seq_length;
    sum += loss;
    sum_sq += loss * loss;
  }
  const double mean = sum / num_samples;
  const double standard_error = std::sqrt((sum_sq / num_samples - mean * mean) / (num_samples - 1));
  EXPECT_NEAR(mean, source->LossFloor(seq_length), kTol.floor_sigmas * standard_error);
  EXPECT_GT(source->LossFloor(seq_length), source->EntropyRate());

  // Next-token frequencies of the frequent contexts against the chain.
  std::map<Block, std::map<int32_t, int64_t>> counts;
  for (size_t t = 2; t < tokens.size(); ++t) ++counts[{tokens[t - 2], tokens[t - 1]}][tokens[t]];
  int checked = 0;
  for (const auto& [context, next_counts] : counts) {
    int64_t n = 0;
    for (const auto& [y, c] : next_counts) n += c;
    if (n < 1000) continue;
    ++checked;
    for (int32_t y = 0; y < source->vocab_size(); ++y) {
      const double p = source->Probability(context, y);
      const double frequency = next_counts.count(y) ? double(next_counts.at(y)) / n : 0.0;
      EXPECT_NEAR(frequency, p, kTol.frequency_sigmas * std::sqrt(p * (1 - p) / n) + 1e-15)
          << "context (" << context[0] << ", " << context[1] << ") -> " << y;
    }
  }
  EXPECT_GE(checked, 50);
}

// Digamma by the recurrence psi(x) = psi(x + 1) - 1/x and the asymptotic
// series (error < 1e-10 once x >= 6).
double Digamma(double x) {
  double shift = 0;
  for (; x < 6; x += 1) shift -= 1 / x;
  const double inv2 = 1 / (x * x);
  return shift + std::log(x) - 0.5 / x - inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 / 252));
}

TEST(SyntheticSourceTest, NextTokenDistributionsHaveDirichletMoments) {
  // Over the contexts (independent draws), for Dirichlet(alpha) with b parts:
  // E[sum p_i^2] = (alpha + 1) / (b alpha + 1) and E[H] = psi(b alpha + 1) -
  // psi(alpha + 1). alpha 0.3 takes the alpha < 1 branch of the gamma sampler.
  for (double alpha : {0.3, 2.0}) {
    SCOPED_TRACE(alpha);
    const int b = 4;
    auto source = MakeSource(Config(2, b, alpha, 1000), 64, 5, 64);
    ASSERT_NE(source, nullptr);
    const int64_t n = source->num_contexts();
    ASSERT_GT(n, 1000);
    double sum_sq = 0, sum_sq_sq = 0, sum_h = 0, sum_h_sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      double squares = 0, h = 0;
      for (int32_t y = 0; y < source->vocab_size(); ++y) {
        const double p = source->Probability(source->ContextTokens(i), y);
        if (p <= 0) continue;
        squares += p * p;
        h -= p * std::log(p);
      }
      sum_sq += squares;
      sum_sq_sq += squares * squares;
      sum_h += h;
      sum_h_sq += h * h;
    }
    auto standard_error = [n](double sum, double sum_of_squares) {
      return std::sqrt((sum_of_squares / n - (sum / n) * (sum / n)) / (n - 1));
    };
    EXPECT_NEAR(sum_sq / n, (alpha + 1) / (b * alpha + 1),
                kTol.frequency_sigmas * standard_error(sum_sq, sum_sq_sq));
    EXPECT_NEAR(sum_h / n, Digamma(b * alpha + 1) - Digamma(alpha + 1),
                kTol.frequency_sigmas * standard_error(sum_h, sum_h_sq));
  }
}

TEST(SyntheticSourceTest, SameSeedSameStreamOtherSeedOtherStream) {
  const SyntheticConfig config = Config(2, 4, 1.0, 5000);
  auto a = MakeSource(config, 16, 11, 16);
  auto b = MakeSource(config, 16, 11, 16);
  auto c = MakeSource(config, 16, 12, 16);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(AllTokens(*a), AllTokens(*b));
  EXPECT_EQ(a->LossFloor(16), b->LossFloor(16));
  EXPECT_NE(AllTokens(*a), AllTokens(*c));
  EXPECT_NE(a->EntropyRate(), c->EntropyRate());
  EXPECT_EQ(a->size(), 5000);
  EXPECT_THAT(a->name(), HasSubstr("seed=11"));
}

TEST(SyntheticSourceTest, TrivialSourcesAreRejectedWithTheBoundAndTheKnob) {
  // One candidate per context: a deterministic sequence, floor ~0.
  auto deterministic = SyntheticSource::Create(Config(2, 1, 1.0, 1000), 10, 1, 16);
  ASSERT_FALSE(deterministic.ok());
  EXPECT_THAT(deterministic.status().message(), HasSubstr("0.5-nat minimum"));
  EXPECT_THAT(deterministic.status().message(),
              HasSubstr("\nhint: raise data.synthetic.branching (now 1)"));
  // Every token, near-uniform probabilities: floor ~ln(16), no structure.
  auto uniform = SyntheticSource::Create(Config(1, 16, 1e4, 1000), 16, 1, 16);
  ASSERT_FALSE(uniform.ok());
  EXPECT_THAT(uniform.status().message(), HasSubstr("ln(vocab_size) - 1 = 1.7726"));
  EXPECT_THAT(uniform.status().message(), HasSubstr("data.synthetic.concentration (now 10000)"));
  EXPECT_THAT(std::string(uniform.status().message()), testing::UserErrorShape());
}

TEST(SyntheticSourceTest, InvalidKnobsAreErrors) {
  // Each is one sentence plus a hint line.
  auto message = [](const SyntheticConfig& config, int64_t vocab, int64_t seq_length) {
    auto source = SyntheticSource::Create(config, vocab, 1, seq_length);
    if (source.ok()) return std::string();
    const std::string text(source.status().message());
    EXPECT_THAT(text, testing::UserErrorShape());
    return text;
  };
  EXPECT_THAT(message(Config(2, 17, 1.0, 1000), 16, 8), HasSubstr("branching is 17"));
  EXPECT_THAT(message(Config(0, 4, 1.0, 1000), 16, 8), HasSubstr("order is 0"));
  EXPECT_THAT(message(Config(2, 4, 0.0, 1000), 16, 8), HasSubstr("concentration is 0"));
  EXPECT_THAT(message(Config(2, 4, 1.0, 2), 16, 8), HasSubstr("num_tokens is 2"));
  EXPECT_THAT(message(Config(2, 4, 1.0, 1000), 16, 0), HasSubstr("seq_length is 0"));
  EXPECT_THAT(message(Config(8, 4, 1.0, 1000), 1 << 16, 8), HasSubstr("too many contexts"));
}

}  // namespace
}  // namespace tetra
