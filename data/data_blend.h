// Megatron-LM weighted blends of data sets, as `--data-path` takes them and
// BlendedDataset draws from them (docs/data.md):
//   DataBlend / ParseDataBlend: "w1 prefix1 w2 prefix2 ..." (weights positive,
//     normalised to sum 1 exactly as Megatron-LM does) or one prefix alone;
//   BlendingIndex: which data set, and which of its samples, global sample i
//     is, by the greedy of megatron/core/datasets/helpers.cpp
//     build_blending_indices: sample i goes to the data set d with the largest
//     weights[d] * max(i, 1) - count[d] (ties to the lowest d) as its
//     count[d]-th sample, then count[d] grows by 1. So after any n samples
//     each count is within 1 of weights[d] * n.
// The index is a cursor, not an array: a run of 2^40 samples needs no 2^40
// entries, and random access replays the greedy from 0 (or from the last
// mark it passed), O(distance x data sets).
#ifndef TETRA_DATA_DATA_BLEND_H_
#define TETRA_DATA_DATA_BLEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tetra {

struct DataBlend {
  std::vector<std::string> prefixes;
  // Normalised to sum 1 as Megatron-LM does (numpy's w / w.sum(), twice: in
  // the dataset builder and in BlendedDataset); empty for one prefix given
  // without a weight, which is no blend.
  std::vector<double> weights;
};

// Splits `text` (the value of config field `field`, e.g. "data.path") at
// whitespace. Errors, naming the offending words: an odd word count above 1,
// a weight that is not a number, a weight that is not positive and finite,
// more data sets than Megatron-LM's 32766.
absl::StatusOr<DataBlend> ParseDataBlend(const std::string& text, const std::string& field);

// numpy.sum of a float64 array, in numpy's order (8192-element buffers, each
// summed pairwise with 8 accumulators per block of up to 128), so normalised
// weights match Megatron-LM's to the last bit (checked against numpy 1.24).
double NumpySum(const std::vector<double>& values);

class BlendingIndex {
 public:
  // `weights` as DataBlend holds them: at least one, normalised.
  explicit BlendingIndex(std::vector<double> weights);

  struct Draw {
    int data_set = 0;
    int64_t sample = 0;  // the data set's own sample index
    bool operator==(const Draw&) const = default;
  };
  // Global sample `sample` >= 0. Moves the cursor to just after it, so
  // consecutive calls cost O(data sets) each.
  Draw At(int64_t sample);

 private:
  // Assigns sample next_ and moves past it.
  Draw Step();

  std::vector<double> weights_;
  int64_t next_ = 0;             // the sample Step assigns next
  std::vector<int64_t> counts_;  // samples each data set got before next_
  // The cursor at the last multiple of kMarkInterval it reached, to go back
  // to for a sample a little behind it.
  int64_t mark_ = 0;
  std::vector<int64_t> mark_counts_;
};

}  // namespace tetra

#endif  // TETRA_DATA_DATA_BLEND_H_
