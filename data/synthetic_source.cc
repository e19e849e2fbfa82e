#include "data/synthetic_source.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/philox.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// Memory guard: every transition costs a token, a probability and a successor.
constexpr int64_t kMaxTransitions = int64_t{1} << 24;
// Power iteration stops when one step changes pi by less than this (L1).
constexpr double kStationaryTolerance = 1e-12;
constexpr int64_t kMaxPowerIterations = 1'000'000;
// docs/data.md: a non-trivial source has a floor of at least 0.5 nats and at
// least 1 nat below ln(vocab_size).
constexpr double kMinFloor = 0.5;
constexpr double kMinGapToUniform = 1.0;
// Philox counters of a context's stream: candidate draws count up from 0,
// gamma draws from here.
constexpr uint64_t kGammaCounterBase = uint64_t{1} << 40;

// splitmix64's finalizer: a bijection, so distinct contexts get distinct streams.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Base-V number of a block of tokens (first token most significant).
uint64_t BlockKey(absl::Span<const int32_t> tokens, int64_t vocab_size) {
  uint64_t key = 0;
  for (int32_t token : tokens) key = key * vocab_size + token;
  return key;
}

// Uniform token in [0, vocab_size) from 32 random bits.
int32_t TokenFromBits(uint32_t bits, int64_t vocab_size) {
  return static_cast<int32_t>((static_cast<uint64_t>(bits) * vocab_size) >> 32);
}

// log of a Gamma(alpha, 1) variate: Marsaglia & Tsang (2000), with their
// Gamma(alpha + 1) * U^(1/alpha) boost for alpha < 1, kept in logs so tiny
// concentrations do not underflow. Consumes Philox blocks from *counter.
double LogGammaVariate(double alpha, const CounterRng& rng, uint64_t* counter) {
  const double a = alpha < 1 ? alpha + 1 : alpha;
  const double d = a - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    PhiloxBlock bits = rng.Bits((*counter)++);
    double x = std::sqrt(-2.0 * std::log(UniformOpen(bits[0]))) *
               std::cos(2.0 * M_PI * UniformOpen(bits[1]));
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    if (std::log(UniformOpen(bits[2])) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      double log_gamma = std::log(d) + std::log(v);
      if (alpha < 1) log_gamma += std::log(UniformOpen(bits[3])) / alpha;
      return log_gamma;
    }
  }
}

struct NextDistribution {
  std::vector<int32_t> tokens;  // distinct candidates
  std::vector<double> probs;    // Dirichlet(concentration) draw
};

struct ChainParams {
  uint64_t seed;
  int64_t vocab_size;
  int order;
  int branching;
  double concentration;
};

// The next-token distribution of the context with key `key`: a pure function
// of (seed, context).
NextDistribution DrawNext(const ChainParams& params, uint64_t key) {
  CounterRng rng(params.seed, Mix64(key));
  NextDistribution next;
  for (uint64_t draw = 0; static_cast<int>(next.tokens.size()) < params.branching; ++draw) {
    int32_t token = TokenFromBits(rng.Bits(draw / 4)[draw % 4], params.vocab_size);
    if (std::find(next.tokens.begin(), next.tokens.end(), token) == next.tokens.end()) {
      next.tokens.push_back(token);
    }
  }
  uint64_t counter = kGammaCounterBase;
  std::vector<double> log_gamma(params.branching);
  for (double& g : log_gamma) g = LogGammaVariate(params.concentration, rng, &counter);
  const double max_log = *std::max_element(log_gamma.begin(), log_gamma.end());
  double sum = 0;
  for (double g : log_gamma) {
    next.probs.push_back(std::exp(g - max_log));
    sum += next.probs.back();
  }
  for (double& p : next.probs) p /= sum;
  return next;
}

double Entropy(absl::Span<const double> probs) {
  double h = 0;
  for (double p : probs) {
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

// Strongly connected components (Tarjan, iterative) of the graph whose node v
// has edges to successors[v * branching + e] (negative: no edge).
std::vector<int32_t> StronglyConnectedComponents(const std::vector<int32_t>& successors,
                                                 int branching, int32_t num_nodes) {
  std::vector<int32_t> index(num_nodes, -1), low(num_nodes), component(num_nodes, -1);
  std::vector<int32_t> stack;
  std::vector<std::pair<int32_t, int>> work;  // (node, next edge to visit)
  int32_t next_index = 0, num_components = 0;
  auto visit = [&](int32_t v) {
    index[v] = low[v] = next_index++;
    stack.push_back(v);
    work.push_back({v, 0});
  };
  for (int32_t root = 0; root < num_nodes; ++root) {
    if (index[root] >= 0) continue;
    visit(root);
    while (!work.empty()) {
      const int32_t v = work.back().first;
      if (work.back().second < branching) {
        const int32_t w = successors[int64_t{v} * branching + work.back().second++];
        if (w < 0) continue;
        if (index[w] < 0) {
          visit(w);
        } else if (component[w] < 0) {  // w is still on the stack
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        int32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          component[w] = num_components;
        } while (w != v);
        ++num_components;
      }
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[v]);
    }
  }
  return component;
}

absl::Status CheckKnobs(const SyntheticConfig& config, int64_t vocab_size, int64_t seq_length) {
  if (vocab_size < 2 || vocab_size > std::numeric_limits<int32_t>::max()) {
    return UserError(
        absl::StrFormat("synthetic data: model.vocab_size %d must be in [2, 2^31)", vocab_size),
        "set model.vocab_size to at least 2, e.g. 256");
  }
  if (config.order() < 1) {
    return UserError(absl::StrFormat("synthetic data: data.synthetic.order is %d, expected at "
                                     "least 1",
                                     config.order()),
                     "set data.synthetic.order, the tokens each next token depends on, e.g. 2");
  }
  if (config.branching() < 1 || config.branching() > vocab_size) {
    return UserError(absl::StrFormat("synthetic data: data.synthetic.branching is %d, expected 1 "
                                     "to vocab_size (%d)",
                                     config.branching(), vocab_size),
                     "set data.synthetic.branching, the possible next tokens of a context, e.g. 4");
  }
  if (!(config.concentration() > 0) || !std::isfinite(config.concentration())) {
    return UserError(absl::StrFormat("synthetic data: data.synthetic.concentration is %g, "
                                     "expected a positive number",
                                     config.concentration()),
                     "set data.synthetic.concentration, e.g. 1.0 (smaller is more predictable)");
  }
  if (config.num_tokens() <= config.order()) {
    return UserError(absl::StrFormat("synthetic data: data.synthetic.num_tokens is %d, expected "
                                     "more than order (%d)",
                                     config.num_tokens(), config.order()),
                     "raise data.synthetic.num_tokens, e.g. to 4194304");
  }
  if (seq_length < 1) {
    return UserError(absl::StrFormat("synthetic data: seq_length is %d, expected >= 1", seq_length),
                     "set train.seq_length to the sample length in tokens, e.g. 256");
  }
  // Context keys are base-V numbers of `order` digits in 62 bits.
  double key_bits = config.order() * std::log2(static_cast<double>(vocab_size));
  if (key_bits > 62) {
    return UserError(absl::StrFormat("synthetic data: vocab_size^order = %d^%d is too many "
                                     "contexts to index",
                                     vocab_size, config.order()),
                     "lower data.synthetic.order");
  }
  return absl::OkStatus();
}

// Phase 1: the contexts reachable from a seeded start, breadth-first, with
// their next-token distributions and successor contexts.
struct ReachableChain {
  std::vector<uint64_t> keys;          // (contexts) each context's block key
  std::vector<NextDistribution> next;  // (contexts)
  std::vector<int32_t> successors;     // (contexts, b), -1 for a zero-probability candidate
};

absl::StatusOr<ReachableChain> ExploreReachableContexts(const ChainParams& params) {
  const int k = params.order, b = params.branching;
  const int64_t vocab_size = params.vocab_size;
  // A successor's key drops the oldest token: key % V^(k-1), times V, plus next.
  uint64_t oldest_digit = 1;
  for (int i = 1; i < k; ++i) oldest_digit *= vocab_size;
  ReachableChain chain;
  std::unordered_map<uint64_t, int32_t> index_of;
  auto add = [&](uint64_t key) {
    auto [it, inserted] = index_of.try_emplace(key, static_cast<int32_t>(chain.keys.size()));
    if (inserted) chain.keys.push_back(key);
    return it->second;
  };
  CounterRng start_rng(params.seed, StableHash("tetra.synthetic.start"));
  std::vector<int32_t> start(k);
  for (int i = 0; i < k; ++i) start[i] = TokenFromBits(start_rng.Bits(i / 4)[i % 4], vocab_size);
  add(BlockKey(start, vocab_size));
  for (size_t v = 0; v < chain.keys.size(); ++v) {
    if (static_cast<int64_t>(chain.keys.size()) * b > kMaxTransitions) {
      return UserError(
          absl::StrFormat("synthetic data: more than %d contexts are reachable (order %d, "
                          "vocab_size %d, branching %d), too many to tabulate",
                          kMaxTransitions / b, k, vocab_size, b),
          "lower data.synthetic.order, data.synthetic.branching or model.vocab_size",
          absl::StatusCode::kResourceExhausted);
    }
    chain.next.push_back(DrawNext(params, chain.keys[v]));
    for (int e = 0; e < b; ++e) {
      chain.successors.push_back(
          chain.next[v].probs[e] > 0
              ? add((chain.keys[v] % oldest_digit) * vocab_size + chain.next[v].tokens[e])
              : -1);
    }
  }
  return chain;
}

// Phase 2: the contexts of one closed class, the largest strongly connected
// component no edge leaves (ties: the one found first in breadth-first
// order), so the chain kept is irreducible. Returns each context's index in
// the class, -1 outside it.
std::vector<int32_t> ClosedClass(const ReachableChain& chain, int b) {
  const int32_t n_all = static_cast<int32_t>(chain.keys.size());
  const std::vector<int32_t> component = StronglyConnectedComponents(chain.successors, b, n_all);
  const int32_t num_components = *std::max_element(component.begin(), component.end()) + 1;
  std::vector<char> closed(num_components, 1);
  std::vector<int32_t> members(num_components, 0);
  for (int32_t v = 0; v < n_all; ++v) {
    ++members[component[v]];
    for (int e = 0; e < b; ++e) {
      const int32_t w = chain.successors[int64_t{v} * b + e];
      if (w >= 0 && component[w] != component[v]) closed[component[v]] = 0;
    }
  }
  int32_t chosen = -1;
  for (int32_t v = 0; v < n_all; ++v) {
    const int32_t c = component[v];
    if (closed[c] && (chosen < 0 || members[c] > members[chosen])) chosen = c;
  }
  TETRA_CHECK(chosen >= 0) << "a finite graph has a closed component";
  std::vector<int32_t> local(n_all, -1);
  int32_t next_index = 0;
  for (int32_t v = 0; v < n_all; ++v) {
    if (component[v] == chosen) local[v] = next_index++;
  }
  return local;
}

// Phase 3: the stationary distribution of the class's chain (successors and
// probabilities (n, b)), by power iteration on the lazy chain (P + I)/2: the
// same fixed point, and no oscillation when the chain is periodic.
absl::StatusOr<std::vector<double>> StationaryDistribution(const std::vector<int32_t>& successors,
                                                           const std::vector<double>& probs,
                                                           int32_t n, int b) {
  std::vector<double> pi(n, 1.0 / n), stepped(n);
  for (int64_t iteration = 0;; ++iteration) {
    if (iteration == kMaxPowerIterations) {
      return UserError(
          absl::StrFormat("synthetic data: the stationary distribution over %d contexts did not "
                          "converge in %d iterations",
                          n, kMaxPowerIterations),
          "raise data.synthetic.branching", absl::StatusCode::kInternal);
    }
    for (int32_t v = 0; v < n; ++v) stepped[v] = 0.5 * pi[v];
    for (int32_t v = 0; v < n; ++v) {
      for (int e = 0; e < b; ++e) {
        const int32_t w = successors[int64_t{v} * b + e];
        if (w >= 0) stepped[w] += 0.5 * pi[v] * probs[int64_t{v} * b + e];
      }
    }
    double total = 0, change = 0;
    for (double p : stepped) total += p;
    for (int32_t v = 0; v < n; ++v) {
      stepped[v] /= total;
      change += std::abs(stepped[v] - pi[v]);
    }
    pi.swap(stepped);
    if (change < kStationaryTolerance) return pi;
  }
}

// The closed class's tables, contexts renumbered 0..n-1 in breadth-first order.
struct ClassTables {
  std::unordered_map<uint64_t, int32_t> context_index;
  std::vector<int32_t> context_tokens;  // (n, order)
  std::vector<int32_t> next_tokens;     // (n, b)
  std::vector<double> next_probs;       // (n, b)
  std::vector<int32_t> successors;      // (n, b), -1 for a zero-probability candidate
};

ClassTables KeepClass(const ChainParams& params, const ReachableChain& chain,
                      const std::vector<int32_t>& local) {
  const int k = params.order, b = params.branching;
  ClassTables t;
  for (size_t v = 0; v < chain.keys.size(); ++v) {
    if (local[v] < 0) continue;
    t.context_index[chain.keys[v]] = local[v];
    for (int i = k - 1; i >= 0; --i) {
      uint64_t digit = chain.keys[v];
      for (int j = 0; j < i; ++j) digit /= params.vocab_size;
      t.context_tokens.push_back(static_cast<int32_t>(digit % params.vocab_size));
    }
    for (int e = 0; e < b; ++e) {
      const int32_t w = chain.successors[static_cast<int64_t>(v) * b + e];
      t.next_tokens.push_back(chain.next[v].tokens[e]);
      t.next_probs.push_back(chain.next[v].probs[e]);
      t.successors.push_back(w >= 0 ? local[w] : -1);
    }
  }
  return t;
}

// The index of `probs` (summing to about 1) that the uniform `u` falls in.
size_t Pick(absl::Span<const double> probs, double u) {
  size_t last_possible = 0;
  double cumulative = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cumulative += probs[i];
    last_possible = i;
    if (u < cumulative) return i;
  }
  return last_possible;  // u beyond a sum rounded below 1
}

}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticSource>> SyntheticSource::Create(
    const SyntheticConfig& config, int64_t vocab_size, uint64_t seed, int64_t seq_length) {
  RETURN_IF_ERROR(CheckKnobs(config, vocab_size, seq_length));
  const ChainParams params{seed, vocab_size, config.order(), config.branching(),
                           config.concentration()};
  ASSIGN_OR_RETURN(const ReachableChain chain, ExploreReachableContexts(params));
  ClassTables tables = KeepClass(params, chain, ClosedClass(chain, params.branching));
  auto source = std::unique_ptr<SyntheticSource>(new SyntheticSource());
  SyntheticSource& s = *source;
  s.name_ = absl::StrFormat("synthetic(order=%d, branching=%d, concentration=%g, seed=%d)",
                            params.order, params.branching, params.concentration, seed);
  s.order_ = params.order;
  s.branching_ = params.branching;
  s.vocab_size_ = vocab_size;
  s.context_index_ = std::move(tables.context_index);
  s.context_tokens_ = std::move(tables.context_tokens);
  s.next_tokens_ = std::move(tables.next_tokens);
  s.next_probs_ = std::move(tables.next_probs);
  ASSIGN_OR_RETURN(s.pi_, StationaryDistribution(tables.successors, s.next_probs_,
                                                 static_cast<int32_t>(s.context_index_.size()),
                                                 params.branching));
  s.ComputeEntropies();
  RETURN_IF_ERROR(s.CheckFloor(seq_length, params.concentration));
  s.Generate(tables.successors, seed, config.num_tokens());
  return source;
}

void SyntheticSource::ComputeEntropies() {
  // The rate, and the stationary block entropies H_m (m <= k) for the first
  // k - 1 positions of a sample.
  const int32_t n = static_cast<int32_t>(pi_.size());
  const int k = order_, b = branching_;
  for (int32_t v = 0; v < n; ++v) {
    entropy_rate_ += pi_[v] * Entropy(absl::MakeConstSpan(next_probs_).subspan(int64_t{v} * b, b));
  }
  block_probs_.resize(k + 1);
  std::vector<double> block_entropy(k + 1, 0.0);
  for (int m = 1; m <= k; ++m) {
    for (int32_t v = 0; v < n; ++v) {
      block_probs_[m][BlockKey(ContextTokens(v).subspan(0, m), vocab_size_)] += pi_[v];
    }
    for (const auto& [key, p] : block_probs_[m]) block_entropy[m] -= p * std::log(p);
  }
  for (int j = 0; j + 1 < k; ++j)
    leading_entropy_.push_back(block_entropy[j + 2] - block_entropy[j + 1]);
}

absl::Status SyntheticSource::CheckFloor(int64_t seq_length, double concentration) const {
  const double floor = LossFloor(seq_length);
  const double max_floor = std::log(static_cast<double>(vocab_size_)) - kMinGapToUniform;
  if (floor < kMinFloor) {
    return UserError(
        absl::StrFormat("synthetic data: the loss floor is %.4f nats at seq_length %d (entropy "
                        "rate %.4f), below the %.1f-nat minimum of a non-trivial source",
                        floor, seq_length, entropy_rate_, kMinFloor),
        absl::StrFormat("raise data.synthetic.branching (now %d) or "
                        "data.synthetic.concentration (now %g)",
                        branching_, concentration));
  }
  if (floor > max_floor) {
    return UserError(
        absl::StrFormat("synthetic data: the loss floor is %.4f nats at seq_length %d, above "
                        "ln(vocab_size) - 1 = %.4f nats, too close to uniform noise to learn",
                        floor, seq_length, max_floor),
        absl::StrFormat("lower data.synthetic.branching (now %d) or "
                        "data.synthetic.concentration (now %g)",
                        branching_, concentration));
  }
  return absl::OkStatus();
}

void SyntheticSource::Generate(const std::vector<int32_t>& successors, uint64_t seed,
                               int64_t num_tokens) {
  // The first context from pi, then the chain, one Philox uniform per position.
  const int k = order_, b = branching_;
  CounterRng sample_rng(seed, StableHash("tetra.synthetic.sample"));
  int32_t context = static_cast<int32_t>(Pick(pi_, sample_rng.Uniform(0)));
  const auto first = ContextTokens(context);
  tokens_.assign(first.begin(), first.end());
  tokens_.reserve(num_tokens);
  for (int64_t t = k; t < num_tokens; ++t) {
    const size_t e = Pick(absl::MakeConstSpan(next_probs_).subspan(int64_t{context} * b, b),
                          sample_rng.Uniform(t));
    tokens_.push_back(next_tokens_[int64_t{context} * b + e]);
    context = successors[int64_t{context} * b + e];
  }
}

double SyntheticSource::LossFloor(int64_t seq_length) const {
  TETRA_CHECK(seq_length >= 1) << "seq_length " << seq_length;
  const int64_t leading = std::min<int64_t>(seq_length, leading_entropy_.size());
  double total = (seq_length - leading) * entropy_rate_;
  for (int64_t j = 0; j < leading; ++j) total += leading_entropy_[j];
  return total / seq_length;
}

double SyntheticSource::Probability(absl::Span<const int32_t> context, int32_t next) const {
  auto in_vocab = [&](int32_t token) { return token >= 0 && token < vocab_size_; };
  if (!in_vocab(next) || !std::all_of(context.begin(), context.end(), in_vocab)) return 0;
  const int64_t m = static_cast<int64_t>(context.size());
  if (m >= order_) {
    auto it = context_index_.find(BlockKey(context.subspan(m - order_), vocab_size_));
    if (it == context_index_.end()) return 0;
    for (int e = 0; e < branching_; ++e) {
      int64_t slot = int64_t{it->second} * branching_ + e;
      if (next_tokens_[slot] == next) return next_probs_[slot];
    }
    return 0;
  }
  // Stationary conditional: P(context, next) / P(context).
  auto block_prob = [&](absl::Span<const int32_t> block, int32_t last) {
    const auto& table = block_probs_[block.size() + 1];
    auto it = table.find(BlockKey(block, vocab_size_) * vocab_size_ + last);
    return it == table.end() ? 0.0 : it->second;
  };
  const double joint = block_prob(context, next);
  const double marginal = m == 0 ? 1.0 : block_prob(context.subspan(0, m - 1), context[m - 1]);
  return marginal > 0 ? joint / marginal : 0.0;
}

absl::Span<const int32_t> SyntheticSource::ContextTokens(int64_t index) const {
  return absl::MakeConstSpan(context_tokens_).subspan(index * order_, order_);
}

absl::Status SyntheticSource::ReadInRange(int64_t begin, int64_t count, int32_t* out) const {
  std::copy_n(tokens_.begin() + begin, count, out);
  return absl::OkStatus();
}

}  // namespace tetra
