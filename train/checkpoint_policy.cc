#include "train/checkpoint_policy.h"

#include <string>
#include <utility>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/local_checkpoint.h"
#include "comm/host_names.h"
#include "core/status_macros.h"
#include "core/timer.h"

namespace tetra {

CheckpointPolicy::CheckpointPolicy(const TrainerConfig& config, const ParallelState& parallel,
                                   std::ostream& progress)
    : config_(config), parallel_(parallel), progress_(progress) {
  if (!config.checkpoint().dir().empty()) stop_request_.emplace();
  if (!config.checkpoint().local_dir().empty()) hosts_ = HostNames(parallel.world());
}

absl::StatusOr<bool> CheckpointPolicy::AfterStep(int64_t step, TrainingRun& run) {
  const bool stop = stop_request_ && stop_request_->Agreed(parallel_.world());
  const bool due = stop || CheckpointDue(config_.checkpoint(), step, config_.train().steps());
  // Every rank takes the same branch: saves are due on the same steps and
  // the one in flight is committed on a step all agree on.
  const CheckpointConfig& checkpoint = config_.checkpoint();
  const bool last = step == config_.train().steps();
  // The last step's save ends the run: its copies in memory are freed instead.
  const bool copy_due =
      !checkpoint.local_dir().empty() && !last && (due || step % checkpoint.local_interval() == 0);
  if (due || copy_due || in_flight_ != nullptr) {
    const Timer stall;
    if (copy_due) {
      RETURN_IF_ERROR(SaveLocalCheckpoint(config_, step, run.model->parameters(),
                                          run.optimizer->dense(), run.optimizer->experts(),
                                          parallel_, hosts_));
    }
    if (in_flight_ != nullptr) RETURN_IF_ERROR(CommitInFlight(/*wait=*/due));
    if (due) RETURN_IF_ERROR(Save(step, run, /*wait=*/stop || last));
    if (last && !hosts_.empty()) {
      RETURN_IF_ERROR(RemoveLocalCheckpoints(checkpoint, parallel_.world(), hosts_));
    }
    stall_ = MaxOverRanks(parallel_.world(), stall.Seconds());
  }
  if (stop) {
    progress_ << "tetra: stopped by " << stop_request_->SignalName() << " after step " << step
              << "; resume by running the same command\n"
              << std::flush;
  }
  return stop;
}

absl::Status CheckpointPolicy::Save(int64_t step, TrainingRun& run, bool wait) {
  const ParameterStore& store = run.model->parameters();
  if (!config_.checkpoint().async()) {
    ASSIGN_OR_RETURN(const std::string saved,
                     SaveCheckpoint(config_, step, store, run.optimizer->dense(),
                                    run.optimizer->experts(), parallel_));
    progress_ << "tetra: checkpoint saved to " << saved << "\n" << std::flush;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(CheckpointSnapshot snapshot,
                   SnapshotCheckpoint(config_, step, store, run.optimizer->dense(),
                                      run.optimizer->experts(), parallel_));
  in_flight_ = std::make_unique<BackgroundCheckpointWrite>(std::move(snapshot));
  return wait ? CommitInFlight(/*wait=*/true) : absl::OkStatus();
}

absl::Status CheckpointPolicy::CommitInFlight(bool wait) {
  // A max over ranks of "still writing": cheap, and only while a save is in flight.
  if (!wait && MaxOverRanks(parallel_.world(), in_flight_->done() ? 0.0 : 1.0) > 0) {
    return absl::OkStatus();
  }
  std::unique_ptr<BackgroundCheckpointWrite> write = std::move(in_flight_);
  absl::Status written = write->Wait();
  ASSIGN_OR_RETURN(const std::string saved,
                   CommitCheckpoint(config_, write->snapshot(), parallel_, std::move(written)));
  progress_ << "tetra: checkpoint saved to " << saved << "\n" << std::flush;
  return absl::OkStatus();
}

}  // namespace tetra
