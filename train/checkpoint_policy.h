// When a run saves: every checkpoint.interval steps and at its last step
// (CheckpointDue), and, with somewhere to save, after the step in which any
// rank was sent SIGTERM or SIGINT, which then stops the run cleanly. With
// checkpoint.local_dir, a copy in memory (checkpoint/local_checkpoint.h)
// every checkpoint.local_interval steps and with each of those saves, so the
// copy is never older than the newest save and a restart prefers it.
//
// With checkpoint.async each rank's data file is written by a background
// thread (checkpoint/background_checkpoint_write.h) while the next steps run;
// after each of them the ranks agree whether every write has ended, and once
// all have, the save is committed, so a kill before that leaves the previous
// checkpoint. One save at a time: a new one (and the last step, and a stop)
// first waits for the one in flight. The last step's and a stop's save are
// waited for before AfterStep returns.
#ifndef TETRA_TRAIN_CHECKPOINT_POLICY_H_
#define TETRA_TRAIN_CHECKPOINT_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/background_checkpoint_write.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"
#include "train/stop_request.h"
#include "train/training_run.h"

namespace tetra {

class CheckpointPolicy {
 public:
  // Everything passed outlives the policy.
  CheckpointPolicy(const TrainerConfig& config, const ParallelState& parallel,
                   std::ostream& progress);

  // After step `step`: saves when due (or commits a save in flight), and
  // returns whether the run must stop (a signal arrived: saved, with a line
  // saying how to resume). Collective over the world.
  absl::StatusOr<bool> AfterStep(int64_t step, TrainingRun& run);
  // The seconds the last AfterStep spent saving or committing, the largest
  // over ranks (none when it did neither), once: the next step's metrics.
  std::optional<double> TakeStall() { return std::exchange(stall_, std::nullopt); }

 private:
  // The synchronous save, or the start of a background one (waited for when `wait`).
  absl::Status Save(int64_t step, TrainingRun& run, bool wait);
  // Commits the save in flight when every rank's write has ended, or, with
  // `wait`, after waiting for them.
  absl::Status CommitInFlight(bool wait);

  const TrainerConfig& config_;
  const ParallelState& parallel_;
  // Each rank's host, for the copies in memory (checkpoint.local_dir); empty without.
  std::vector<std::string> hosts_;
  std::ostream& progress_;
  std::optional<StopRequest> stop_request_;
  std::unique_ptr<BackgroundCheckpointWrite> in_flight_;
  std::optional<double> stall_;
};

}  // namespace tetra

#endif  // TETRA_TRAIN_CHECKPOINT_POLICY_H_
