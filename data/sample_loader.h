// SampleLoader: which tokens make sample s of a run (docs/architecture.md "Numerics of
// one step"), read from one token stream. A stream of N tokens holds
// (N - 1) / T samples per epoch, sample position p being tokens [p*T, p*T + T]
// (T + 1 tokens: inputs are the first T, targets the last T). Run sample s lies
// in epoch s / samples_per_epoch at position s % samples_per_epoch; with
// shuffling that position goes through a permutation that is a pure function
// of (seed, data set, epoch), `data set` being the stream's index in a blend
// (0 for a stream alone), so every rank and every restart agrees on the data
// without talking. Token ids are checked against the vocabulary as samples
// load, not by a scan of the whole data set at start-up: a run pays only for
// the tokens it reads.
#ifndef TETRA_DATA_SAMPLE_LOADER_H_
#define TETRA_DATA_SAMPLE_LOADER_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/sample_source.h"
#include "data/token_stream.h"

namespace tetra {

class SampleLoader final : public SampleSource {
 public:
  // An error if the stream is too short for one sample (seq_length + 1 tokens).
  // vocab_size >= 1 is the model's: every loaded token must lie in [0, vocab_size).
  // `data_set` picks the Philox streams of the shuffles: a blend gives each
  // of its data sets its own index.
  static absl::StatusOr<SampleLoader> Create(std::unique_ptr<TokenStream> stream,
                                             int64_t seq_length, bool shuffle, uint64_t seed,
                                             int64_t vocab_size, int data_set = 0);

  void set_epoch_callback(EpochCallback callback) override {
    epoch_callback_ = std::move(callback);
  }

  int64_t samples_per_epoch() const override { return samples_per_epoch_; }
  int64_t seq_length() const override { return seq_length_; }
  int64_t EpochOf(int64_t sample) const { return sample / samples_per_epoch_; }
  // The position in the stream's sample grid of run sample `sample`: its first
  // token is at PositionOf(sample) * seq_length.
  int64_t PositionOf(int64_t sample);
  const TokenStream& stream() const { return *stream_; }

 private:
  absl::Status LoadSamples(int64_t first_sample, int64_t count, int32_t* inputs,
                           int32_t* targets) override;
  SampleLoader(std::unique_ptr<TokenStream> stream, int64_t seq_length, bool shuffle, uint64_t seed,
               int64_t vocab_size, int data_set);
  // An error for the first token of buffer_ outside [0, vocab_size_); buffer_
  // holds the stream's tokens from position `start`.
  absl::Status CheckVocabulary(int64_t start) const;
  // Fisher-Yates permutation of one epoch's positions.
  const std::vector<int64_t>& Permutation(int64_t epoch);

  std::unique_ptr<TokenStream> stream_;
  int64_t seq_length_;
  int64_t samples_per_epoch_;
  bool shuffle_;
  uint64_t seed_;
  int64_t vocab_size_;
  int data_set_;
  int64_t permutation_epoch_ = -1;  // epoch of permutation_, -1 for none
  std::vector<int64_t> permutation_;
  int64_t last_epoch_ = -1;  // epoch of the last sample loaded, -1 before any
  EpochCallback epoch_callback_;
  std::vector<int32_t> buffer_;  // (seq_length + 1)
};

}  // namespace tetra

#endif  // TETRA_DATA_SAMPLE_LOADER_H_
