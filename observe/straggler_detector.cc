#include "observe/straggler_detector.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace tetra {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

StragglerStats FindStraggler(const std::vector<double>& compute_s) {
  StragglerStats stats;
  if (compute_s.empty()) return stats;
  stats.slowest_rank =
      static_cast<int>(std::max_element(compute_s.begin(), compute_s.end()) - compute_s.begin());
  const double median = Median(compute_s);
  // All-zero times (nothing measured) are no evidence of a straggler.
  if (median > 0) stats.ratio = compute_s[stats.slowest_rank] / median;
  return stats;
}

std::string StragglerMessage(const StragglerWarning& warning, const std::string& host) {
  return absl::StrFormat(
      "tetra: warning: rank %d (host %s) is a straggler: its compute took at least %.1fx the "
      "median rank's in each of the last %d steps, and every step waits for it\n"
      "hint: check that host's GPU (clocks, temperature, errors: nvidia-smi -q -d "
      "PERFORMANCE,ECC) and network, or leave the host out; a pipeline stage with more layers "
      "than the others shows here too (balance parallel.pipeline_layers); "
      "log.straggler_threshold 0 turns this warning off",
      warning.rank, host, warning.ratio, warning.steps);
}

std::optional<StragglerWarning> StragglerDetector::Observe(const StragglerStats& step) {
  if (threshold_ <= 0 || !(step.ratio > threshold_)) {
    rank_ = -1;
    run_ = 0;
    return std::nullopt;
  }
  if (step.slowest_rank != rank_) {
    rank_ = step.slowest_rank;
    run_ = 0;
    smallest_ratio_ = step.ratio;
  }
  ++run_;
  smallest_ratio_ = std::min(smallest_ratio_, step.ratio);
  // Only the step that completes the run names the rank: later slow steps
  // of the same run stay quiet.
  if (run_ != steps_) return std::nullopt;
  return StragglerWarning{.rank = rank_, .ratio = smallest_ratio_, .steps = run_};
}

}  // namespace tetra
