#include "data/sample_loader.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/philox.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {

absl::StatusOr<SampleLoader> SampleLoader::Create(std::unique_ptr<TokenStream> stream,
                                                  int64_t seq_length, bool shuffle, uint64_t seed,
                                                  int64_t vocab_size, int data_set) {
  TETRA_CHECK(vocab_size >= 1 && data_set >= 0)
      << "vocab_size " << vocab_size << ", data set " << data_set;
  if (seq_length < 1) {
    return UserError(absl::StrFormat("train.seq_length is %d, expected at least 1", seq_length),
                     "set train.seq_length to the sample length in tokens, e.g. 256");
  }
  if (stream->size() < seq_length + 1) {
    return UserError(absl::StrFormat("%s: %d tokens are too few for one sample, which needs "
                                     "seq_length + 1 = %d tokens",
                                     stream->name(), stream->size(), seq_length + 1),
                     "use more data or a smaller train.seq_length");
  }
  return SampleLoader(std::move(stream), seq_length, shuffle, seed, vocab_size, data_set);
}

SampleLoader::SampleLoader(std::unique_ptr<TokenStream> stream, int64_t seq_length, bool shuffle,
                           uint64_t seed, int64_t vocab_size, int data_set)
    : stream_(std::move(stream)),
      seq_length_(seq_length),
      samples_per_epoch_((stream_->size() - 1) / seq_length),
      shuffle_(shuffle),
      seed_(seed),
      vocab_size_(vocab_size),
      data_set_(data_set),
      buffer_(seq_length + 1) {}

const std::vector<int64_t>& SampleLoader::Permutation(int64_t epoch) {
  if (epoch != permutation_epoch_) {
    // Data set d's epochs draw from streams d x 2^32 past a lone stream's.
    CounterRng rng(seed_, StableHash("tetra.data.shuffle") +
                              (static_cast<uint64_t>(data_set_) << 32) +
                              static_cast<uint64_t>(epoch));
    permutation_.resize(samples_per_epoch_);
    for (int64_t i = 0; i < samples_per_epoch_; ++i) permutation_[i] = i;
    for (int64_t i = samples_per_epoch_ - 1; i > 0; --i) {
      PhiloxBlock bits = rng.Bits(i);
      uint64_t r = (static_cast<uint64_t>(bits[0]) << 32) | bits[1];
      // j uniform in [0, i] (multiply-shift; bias below 2^-40 for any real epoch).
      auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
      std::swap(permutation_[i], permutation_[j]);
    }
    permutation_epoch_ = epoch;
  }
  return permutation_;
}

int64_t SampleLoader::PositionOf(int64_t sample) {
  const int64_t position = sample % samples_per_epoch_;
  return shuffle_ ? Permutation(EpochOf(sample))[position] : position;
}

absl::Status SampleLoader::LoadSamples(int64_t first_sample, int64_t count, int32_t* inputs,
                                       int32_t* targets) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t sample = first_sample + i;
    const int64_t epoch = EpochOf(sample);
    if (last_epoch_ >= 0 && epoch > last_epoch_ && epoch_callback_)
      epoch_callback_(stream_->name(), epoch);
    last_epoch_ = epoch;
    const int64_t start = PositionOf(sample) * seq_length_;
    RETURN_IF_ERROR(stream_->Read(start, seq_length_ + 1, buffer_.data()));
    RETURN_IF_ERROR(CheckVocabulary(start));
    std::copy_n(buffer_.begin(), seq_length_, inputs + i * seq_length_);
    std::copy_n(buffer_.begin() + 1, seq_length_, targets + i * seq_length_);
  }
  return absl::OkStatus();
}

absl::Status SampleLoader::CheckVocabulary(int64_t start) const {
  for (size_t i = 0; i < buffer_.size(); ++i) {
    if (buffer_[i] >= 0 && buffer_[i] < vocab_size_) continue;
    const TokenLocation where = stream_->Locate(start + static_cast<int64_t>(i));
    return UserError(absl::StrFormat("%s: token at position %d is %d, outside the vocabulary "
                                     "[0, %d)",
                                     where.file, where.position, buffer_[i], vocab_size_),
                     "check that model.vocab_size matches the tokenizer that wrote the data");
  }
  return absl::OkStatus();
}

}  // namespace tetra
