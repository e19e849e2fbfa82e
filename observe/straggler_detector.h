// Naming the straggler: at scale one slow rank (a throttled GPU, a bad NIC)
// holds back every step, because the others wait for it in the next
// collective. Each step, the ranks' compute times (StepTiming::ComputeSeconds,
// observe/step_timing.h: the time not blocked on communication) give the
// slowest rank and its time over the median; a rank that stays the slowest by
// more than a threshold for several steps in a row is named once, as
// Megatron's NVRx straggler detection names it.
#ifndef TETRA_OBSERVE_STRAGGLER_DETECTOR_H_
#define TETRA_OBSERVE_STRAGGLER_DETECTOR_H_

#include <optional>
#include <string>
#include <vector>

namespace tetra {

// The median of `values` (the mean of the middle two for an even count); 0
// for none.
double Median(std::vector<double> values);

struct StragglerStats {
  int slowest_rank = 0;  // the lowest of equally slow ranks
  double ratio = 1;      // its compute time over the median; 1 when the median is 0
};

// The slowest of the ranks whose compute times `compute_s` holds (one per
// world rank, in rank order).
StragglerStats FindStraggler(const std::vector<double>& compute_s);

// A rank to name: it was the slowest, by at least `ratio` times the median,
// for each of the last `steps` steps.
struct StragglerWarning {
  int rank = 0;
  double ratio = 0;
  int steps = 0;
};

// "tetra: warning: rank 3 (host gpu-node-7) is a straggler: ..." and a hint
// line: what the progress stream says of `warning`'s rank, on `host`.
std::string StragglerMessage(const StragglerWarning& warning, const std::string& host);

// Counts the consecutive steps on which one rank is the slowest with a ratio
// above `threshold`, and names it when the count reaches `steps`: once, until
// a step in which it is not that slow (it recovered, or another rank is the
// slowest) starts the count again.
class StragglerDetector {
 public:
  // threshold 0 names no rank.
  StragglerDetector(double threshold, int steps) : threshold_(threshold), steps_(steps) {}

  std::optional<StragglerWarning> Observe(const StragglerStats& step);

 private:
  double threshold_;
  int steps_;
  int rank_ = -1;  // the rank slow in the current run of steps, -1 for none
  int run_ = 0;
  double smallest_ratio_ = 0;  // over the run
};

}  // namespace tetra

#endif  // TETRA_OBSERVE_STRAGGLER_DETECTOR_H_
