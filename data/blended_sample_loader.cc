#include "data/blended_sample_loader.h"

#include <utility>

#include "core/logging.h"
#include "core/status_macros.h"

namespace tetra {

BlendedSampleLoader::BlendedSampleLoader(std::vector<SampleLoader> data_sets,
                                         std::vector<double> weights)
    : data_sets_(std::move(data_sets)), index_(weights) {
  TETRA_CHECK(!data_sets_.empty() && data_sets_.size() == weights.size())
      << data_sets_.size() << " data sets, " << weights.size() << " weights";
  for (const SampleLoader& data_set : data_sets_) {
    TETRA_CHECK(data_set.seq_length() == seq_length()) << "data sets of different seq_length";
  }
}

int64_t BlendedSampleLoader::samples_per_epoch() const {
  int64_t samples = 0;
  for (const SampleLoader& data_set : data_sets_) samples += data_set.samples_per_epoch();
  return samples;
}

void BlendedSampleLoader::set_epoch_callback(EpochCallback callback) {
  for (SampleLoader& data_set : data_sets_) data_set.set_epoch_callback(callback);
}

absl::Status BlendedSampleLoader::LoadSamples(int64_t first_sample, int64_t count, int32_t* inputs,
                                              int32_t* targets) {
  const int64_t seq = seq_length();
  for (int64_t i = 0; i < count; ++i) {
    const BlendingIndex::Draw draw = index_.At(first_sample + i);
    RETURN_IF_ERROR(
        data_sets_[draw.data_set].Load(draw.sample, 1, inputs + i * seq, targets + i * seq));
  }
  return absl::OkStatus();
}

}  // namespace tetra
