// When a run saves: every checkpoint.interval steps and at its last step
// (CheckpointDue), and, with somewhere to save, after the step in which any
// rank was sent SIGTERM or SIGINT, which then stops the run cleanly.
#ifndef TETRA_TRAIN_CHECKPOINT_POLICY_H_
#define TETRA_TRAIN_CHECKPOINT_POLICY_H_

#include <cstdint>
#include <optional>
#include <ostream>

#include "absl/status/statusor.h"
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

  // After step `step`: saves when due, and returns whether the run must stop
  // (a signal arrived: saved, with a line saying how to resume). Collective
  // over the world.
  absl::StatusOr<bool> AfterStep(int64_t step, TrainingRun& run);

 private:
  const TrainerConfig& config_;
  const ParallelState& parallel_;
  std::ostream& progress_;
  std::optional<StopRequest> stop_request_;
};

}  // namespace tetra

#endif  // TETRA_TRAIN_CHECKPOINT_POLICY_H_
