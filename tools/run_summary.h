// A training run as `tetra report` sees it: the metrics file's lines
// (observe/metrics_log.h) read back, the layout from the first line's run
// fields, and per-run statistics over the steps after the first (step 1 pays
// for first touches and thread start).
#ifndef TETRA_TOOLS_RUN_SUMMARY_H_
#define TETRA_TOOLS_RUN_SUMMARY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "observe/metrics_log.h"
#include "observe/straggler_detector.h"  // Median
#include "pipeline/schedule.h"

namespace tetra {

// One metrics line: field -> number (null reads as NaN; strings are skipped).
using MetricsLine = std::map<std::string, double>;

// Parses one flat JSON object of numbers, as MetricsJson writes them.
absl::StatusOr<MetricsLine> ParseMetricsLine(const std::string& line);

struct RunSummary {
  std::string path;
  RunLayout
      layout;     // the first line's run fields (schedule and virtual_stages: 1F1B, 1 when absent)
  int steps = 0;  // lines read
  // Medians over steps 2..N (step 1 alone when the run has one step).
  double step_time_s = 0, best_step_time_s = 0, tokens_per_s = 0;
  // The breakdown's medians; absent fields read as 0.
  double fwd_s = 0, bwd_s = 0, optimizer_s = 0;
  double comm_tp_s = 0, comm_dp_s = 0, comm_pp_s = 0, comm_ep_s = 0;
  std::optional<double> bubble_fraction, mfu;
  // Multi-rank runs: the rank most often the slowest over those steps (the
  // lowest on ties), on how many of the compared_steps, and the median
  // straggler_ratio.
  std::optional<int> slowest_rank;
  int slowest_rank_steps = 0, compared_steps = 0;
  std::optional<double> straggler_ratio;
  double last_loss = 0;
};

// Reads `path`; a file without the run fields on its first line (written
// before they existed), empty, or unparsable is a user error.
absl::StatusOr<RunSummary> ReadRun(const std::string& path);

// The pipeline schedule `layout`'s run executed (its stages, micro-batches,
// chunks per rank and kind), as ScheduleSpecFromConfig maps the run's
// parallel.schedule and sizes; an error for fields no run can have.
absl::StatusOr<ScheduleSpec> RunScheduleSpec(const RunLayout& layout);

}  // namespace tetra

#endif  // TETRA_TOOLS_RUN_SUMMARY_H_
