// SampleSource: run sample s of the training (or validation) data, for any s,
// which is all the trainer asks of its data (docs/architecture.md "Numerics of one
// step"). Two kinds: SampleLoader reads one token stream (train/
// sample_loader.h); BlendedSampleLoader draws from several as Megatron-LM's
// BlendedDataset does (data/blended_sample_loader.h).
#ifndef TETRA_DATA_SAMPLE_SOURCE_H_
#define TETRA_DATA_SAMPLE_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace tetra {

class SampleSource {
 public:
  // Called with a data set's name and its new epoch when a load reaches a
  // sample of a later epoch of that data set than the one it loaded before
  // (not for the epoch of its first sample loaded, so a resumed run does not
  // report an epoch it started in).
  using EpochCallback = std::function<void(const std::string& data_set, int64_t epoch)>;

  virtual ~SampleSource() = default;

  // Run samples first_sample .. first_sample + count - 1 into inputs and
  // targets, each (count, seq_length), row-major. A token outside the
  // vocabulary is an error naming its file and position in that file.
  absl::Status Load(int64_t first_sample, int64_t count, int32_t* inputs, int32_t* targets);

  virtual int64_t seq_length() const = 0;
  // The samples of one pass over the data: a stream's samples per epoch, or
  // the sum of a blend's data sets' (each of which wraps on its own).
  virtual int64_t samples_per_epoch() const = 0;
  virtual void set_epoch_callback(EpochCallback callback) = 0;

 protected:
  // Load with first_sample >= 0 and count >= 0.
  virtual absl::Status LoadSamples(int64_t first_sample, int64_t count, int32_t* inputs,
                                   int32_t* targets) = 0;
};

}  // namespace tetra

#endif  // TETRA_DATA_SAMPLE_SOURCE_H_
