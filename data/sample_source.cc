#include "data/sample_source.h"

#include "absl/strings/str_format.h"

namespace tetra {

absl::Status SampleSource::Load(int64_t first_sample, int64_t count, int32_t* inputs,
                                int32_t* targets) {
  if (first_sample < 0 || count < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot load %d samples from sample %d: both must be non-negative", count, first_sample));
  }
  return LoadSamples(first_sample, count, inputs, targets);
}

}  // namespace tetra
