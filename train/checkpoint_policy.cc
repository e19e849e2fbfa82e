#include "train/checkpoint_policy.h"

#include <string>

#include "checkpoint/checkpoint_writer.h"
#include "core/status_macros.h"

namespace tetra {

CheckpointPolicy::CheckpointPolicy(const TrainerConfig& config, const ParallelState& parallel,
                                   std::ostream& progress)
    : config_(config), parallel_(parallel), progress_(progress) {
  if (!config.checkpoint().dir().empty()) stop_request_.emplace();
}

absl::StatusOr<bool> CheckpointPolicy::AfterStep(int64_t step, TrainingRun& run) {
  const bool stop = stop_request_ && stop_request_->Agreed(parallel_.world());
  if (stop || CheckpointDue(config_.checkpoint(), step, config_.train().steps())) {
    ASSIGN_OR_RETURN(const std::string saved,
                     SaveCheckpoint(config_, step, run.model->parameters(), run.optimizer->dense(),
                                    run.optimizer->experts(), parallel_));
    progress_ << "tetra: checkpoint saved to " << saved << "\n" << std::flush;
  }
  if (stop) {
    progress_ << "tetra: stopped by " << stop_request_->SignalName() << " after step " << step
              << "; resume by running the same command\n"
              << std::flush;
  }
  return stop;
}

}  // namespace tetra
