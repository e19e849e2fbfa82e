// What a run tells its user and its files, and when: it times each step
// (with the profiler's spans and the trace's range), completes the step's
// metrics (throughput, MFU, memory, the layout on the first line), appends
// them to the metrics log and TensorBoard, prints a progress line every
// log.interval steps, names a straggling rank (observe/straggler_detector.h),
// and prints the run's summary at its end.
#ifndef TETRA_TRAIN_RUN_REPORTER_H_
#define TETRA_TRAIN_RUN_REPORTER_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device_work.h"
#include "core/profiler.h"
#include "core/timer.h"
#include "observe/metrics_log.h"
#include "observe/straggler_detector.h"
#include "observe/tensorboard_writer.h"
#include "observe/trace_writer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"
#include "train/training_run.h"

namespace tetra {

class RunReporter {
 public:
  // Everything passed outlives the reporter.
  RunReporter(const TrainerConfig& config, const ParallelState& parallel, const TrainingRun& run,
              std::ostream& progress);
  // Opens the metrics log and TensorBoard directory on the logging rank, then
  // starts the run's clock with the ranks' trace clocks together. Collective
  // over the world.
  absl::Status Start();

  // Around one step's work: BeginStep starts its clock and spans, EndStep
  // stops them and fills m's timing and the figures derived from it.
  // EndStep is collective over the world.
  void BeginStep(int64_t step);
  absl::Status EndStep(StepMetrics& m);
  // Writes m (validation loss included) where the config says, the
  // progress line when one is due, and a warning naming a straggler.
  absl::Status Log(const StepMetrics& m);
  // "done: 3000 steps in 23.1 s | loss 1.1991 (mean of the last 100 steps), ..."
  void Summary(const std::vector<StepMetrics>& steps) const;

 private:
  absl::Status OpenFiles();

  const TrainerConfig& config_;
  const ParallelState& parallel_;
  const TrainingRun& run_;
  std::ostream& progress_;
  std::optional<MetricsLog> metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::optional<TraceWriter> trace_;
  StepMetrics memory_;  // the buffers' sizes: fixed, their largest over ranks
  Timer run_timer_, step_timer_;
  std::optional<ScopedSpan> step_span_;
  int64_t mallocs_before_ = 0;
  DeviceWorkCounts work_before_;
  StragglerDetector straggler_;
  std::vector<std::string> hosts_;  // by world rank
};

}  // namespace tetra

#endif  // TETRA_TRAIN_RUN_REPORTER_H_
