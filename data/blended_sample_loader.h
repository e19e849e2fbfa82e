// BlendedSampleLoader: the samples of a Megatron-LM weighted blend
// (`data.path: "0.3 prefixA 0.7 prefixB"`), as BlendedDataset draws them:
// global sample i is sample j of data set d, (d, j) from the greedy
// BlendingIndex (data/data_blend.h), and data set d's sample j is what a
// SampleLoader over d's stream alone loads as sample j (its own epochs; with
// shuffling, permutations that are a pure function of (seed, d, epoch)). So
// the samples are a pure function of (weights, prefixes, seed, seq_length),
// and any sample can be loaded first (a resumed run starts mid-blend).
#ifndef TETRA_DATA_BLENDED_SAMPLE_LOADER_H_
#define TETRA_DATA_BLENDED_SAMPLE_LOADER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "data/data_blend.h"
#include "data/sample_loader.h"
#include "data/sample_source.h"

namespace tetra {

class BlendedSampleLoader final : public SampleSource {
 public:
  // `data_sets[d]` was created with data set index d and has weight
  // `weights[d]` (normalised, as DataBlend holds them); all have the same
  // seq_length.
  BlendedSampleLoader(std::vector<SampleLoader> data_sets, std::vector<double> weights);

  int64_t seq_length() const override { return data_sets_.front().seq_length(); }
  int64_t samples_per_epoch() const override;
  void set_epoch_callback(EpochCallback callback) override;

 private:
  absl::Status LoadSamples(int64_t first_sample, int64_t count, int32_t* inputs,
                           int32_t* targets) override;

  std::vector<SampleLoader> data_sets_;
  BlendingIndex index_;
};

}  // namespace tetra

#endif  // TETRA_DATA_BLENDED_SAMPLE_LOADER_H_
