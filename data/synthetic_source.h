// SyntheticSource: the embedded default data set (docs/data.md). A
// stationary sparse order-k Markov chain over the vocabulary: each context c
// (the last k tokens) continues with one of `branching` distinct candidate
// tokens with Dirichlet(concentration) probabilities, both pure functions of
// (seed, c) drawn with Philox, so every rank builds the same source. The chain
// is restricted to one closed irreducible class of contexts reachable from a
// seeded start, its stationary distribution pi is found by power iteration,
// and the generated stream starts from pi, so it is exactly stationary.
//
// Because the process is known, so is the best possible loss: LossFloor(T) is
// the mean over the T target positions of a sample of H(X_{j+1} | X_0..X_j),
// the entropy of the next token given every earlier token of the same sample
// (the entropy rate once j >= k-1; differences of stationary block entropies
// before). A run shows how close the model gets to it.
#ifndef TETRA_DATA_SYNTHETIC_SOURCE_H_
#define TETRA_DATA_SYNTHETIC_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/token_stream.h"
#include "proto/config.pb.h"

namespace tetra {

class SyntheticSource : public TokenStream {
 public:
  // Builds the chain and generates `config.num_tokens` tokens. Errors for
  // invalid knobs, and for a trivial source: LossFloor(seq_length) must be at
  // least 0.5 nats and at most ln(vocab_size) - 1 nats.
  static absl::StatusOr<std::unique_ptr<SyntheticSource>> Create(const SyntheticConfig& config,
                                                                 int64_t vocab_size, uint64_t seed,
                                                                 int64_t seq_length);

  // Nats per token of the chain: sum_c pi(c) H(next | c).
  double EntropyRate() const { return entropy_rate_; }
  // Best expected cross-entropy (nats) over the `seq_length` targets of a sample.
  double LossFloor(int64_t seq_length) const;
  // P(next | context) under the stationary process: the chain's transition
  // probability for k or more context tokens (the last k count), the
  // stationary conditional for fewer. 0 for an unseen context.
  double Probability(absl::Span<const int32_t> context, int32_t next) const;

  int order() const { return order_; }
  int64_t vocab_size() const { return vocab_size_; }
  // The contexts of the closed class, each with its stationary probability.
  int64_t num_contexts() const { return static_cast<int64_t>(pi_.size()); }
  absl::Span<const int32_t> ContextTokens(int64_t index) const;  // (order)
  double StationaryProbability(int64_t index) const { return pi_[index]; }

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  const std::string& name() const override { return name_; }
  TokenLocation Locate(int64_t position) const override { return {name_, position}; }

 protected:
  absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const override;

 private:
  SyntheticSource() = default;
  // Create's phases after the chain's class is tabulated: the entropy rate
  // and the leading positions' entropies from pi_; the floor within the
  // bounds of a learnable source; the token stream.
  void ComputeEntropies();
  absl::Status CheckFloor(int64_t seq_length, double concentration) const;
  void Generate(const std::vector<int32_t>& successors, uint64_t seed, int64_t num_tokens);

  std::string name_;
  int order_ = 0;
  int branching_ = 0;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> context_tokens_;  // (contexts, order)
  std::vector<int32_t> next_tokens_;     // (contexts, branching)
  std::vector<double> next_probs_;       // (contexts, branching)
  std::vector<double> pi_;               // (contexts)
  std::unordered_map<uint64_t, int32_t> context_index_;
  // block_probs_[m]: stationary probability of each m-token block (by key).
  std::vector<std::unordered_map<uint64_t, double>> block_probs_;
  std::vector<double> leading_entropy_;  // H(X_{j+1} | X_0..X_j), j < order - 1
  double entropy_rate_ = 0;
  std::vector<int32_t> tokens_;
};

}  // namespace tetra

#endif  // TETRA_DATA_SYNTHETIC_SOURCE_H_
