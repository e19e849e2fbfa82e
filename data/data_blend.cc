#include "data/data_blend.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// BlendedDataset's dataset index is int16 and asserts fewer than 32767 data sets.
constexpr size_t kMaxDataSets = 32766;
// How far apart BlendingIndex keeps the mark it can go back to.
constexpr int64_t kMarkInterval = int64_t{1} << 16;

// numpy's default ufunc buffer size (numpy.getbufsize()).
constexpr size_t kNumpyBuffer = 8192;

constexpr char kBlendExample[] = "\"0.3 prefixA 0.7 prefixB\"";

// Megatron-LM's utils.normalize: w / numpy.sum(w).
std::vector<double> Normalize(std::vector<double> weights) {
  const double sum = NumpySum(weights);
  for (double& w : weights) w /= sum;
  return weights;
}

// numpy's pairwise_sum over values[begin, begin + n).
double PairwiseSum(const std::vector<double>& values, size_t begin, size_t n) {
  if (n < 8) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += values[begin + i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = values[begin + j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += values[begin + i + j];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += values[begin + i];
    return sum;
  }
  // Halves, the first a multiple of 8 long.
  const size_t half = n / 2 - n / 2 % 8;
  return PairwiseSum(values, begin, half) + PairwiseSum(values, begin + half, n - half);
}

}  // namespace

double NumpySum(const std::vector<double>& values) {
  // numpy's reduction hands the loop buffers of kNumpyBuffer elements.
  double sum = 0;
  for (size_t begin = 0; begin < values.size(); begin += kNumpyBuffer) {
    sum += PairwiseSum(values, begin, std::min(kNumpyBuffer, values.size() - begin));
  }
  return sum;
}

absl::StatusOr<DataBlend> ParseDataBlend(const std::string& text, const std::string& field) {
  const std::vector<std::string> words =
      absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
  if (words.empty()) {
    return UserError(
        absl::StrCat(field, " ", UserText(text), " names no data set"),
        absl::StrCat("set ", field, " to a data set prefix or a blend such as ", kBlendExample));
  }
  if (words.size() == 1) return DataBlend{.prefixes = words, .weights = {}};
  if (words.size() % 2 != 0) {
    return UserError(
        absl::StrCat(field, " ", UserText(text), " has ", words.size(),
                     " words, but a Megatron-LM blend is pairs of weight and prefix"),
        absl::StrCat("set ", field, " to one prefix, or to weights and prefixes such as ",
                     kBlendExample));
  }
  if (words.size() / 2 > kMaxDataSets) {
    return UserError(absl::StrCat(field, " blends ", words.size() / 2,
                                  " data sets, more than Megatron-LM's ", kMaxDataSets),
                     "merge data sets into fewer prefixes");
  }
  DataBlend blend;
  std::vector<double> weights;
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::string& word = words[i];
    const std::string& prefix = words[i + 1];
    double weight = 0;
    if (!absl::SimpleAtod(word, &weight)) {
      return UserError(
          absl::StrCat(field, ": the weight of data set ", UserText(prefix), " (word ", i + 1,
                       ") is ", UserText(word), ", not a number"),
          absl::StrCat("write each data set's weight before its prefix, e.g. ", kBlendExample));
    }
    if (!std::isfinite(weight) || weight <= 0) {
      return UserError(absl::StrCat(field, ": the weight of data set ", UserText(prefix), " is ",
                                    UserText(word), ", but weights must be positive and finite"),
                       "give every data set a weight above 0 (weights are normalised to sum 1)");
    }
    weights.push_back(weight);
    blend.prefixes.push_back(prefix);
  }
  // The dataset builder normalises, then BlendedDataset again "for bitwise
  // identical comparison"; the second pass can move a weight by an ulp.
  blend.weights = Normalize(Normalize(std::move(weights)));
  return blend;
}

BlendingIndex::BlendingIndex(std::vector<double> weights)
    : weights_(std::move(weights)), counts_(weights_.size(), 0), mark_counts_(weights_.size(), 0) {
  TETRA_CHECK(!weights_.empty()) << "a blend needs at least one data set";
}

BlendingIndex::Draw BlendingIndex::Step() {
  // Exactly build_blending_indices' arithmetic, in double.
  const double position = std::max(static_cast<double>(next_), 1.0);
  int best = 0;
  double best_error = weights_[0] * position - static_cast<double>(counts_[0]);
  for (size_t d = 1; d < weights_.size(); ++d) {
    const double error = weights_[d] * position - static_cast<double>(counts_[d]);
    if (error > best_error) {
      best_error = error;
      best = static_cast<int>(d);
    }
  }
  const Draw draw{.data_set = best, .sample = counts_[best]++};
  if (++next_ % kMarkInterval == 0) {
    mark_ = next_;
    mark_counts_ = counts_;
  }
  return draw;
}

BlendingIndex::Draw BlendingIndex::At(int64_t sample) {
  TETRA_CHECK(sample >= 0) << "blend sample " << sample;
  if (sample < next_) {
    // Back to the mark if it is not past `sample`, else to the start.
    const bool from_mark = mark_ <= sample;
    next_ = from_mark ? mark_ : 0;
    counts_ = from_mark ? mark_counts_ : std::vector<int64_t>(weights_.size(), 0);
  }
  while (next_ < sample) Step();
  return Step();
}

}  // namespace tetra
