// The training loop of one rank: data, model, micro-batch gradient
// accumulation, global-norm clipping, AdamW with the LR schedule, metrics and
// progress lines, and the final export.
#ifndef TETRA_TRAIN_TRAINER_H_
#define TETRA_TRAIN_TRAINER_H_

#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "observe/metrics_log.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

struct TrainResult {
  std::vector<StepMetrics> steps;
};

// `config` must have passed ValidateConfig for the world's size. Collective
// over the world. The logging rank writes progress lines to `progress`.
absl::StatusOr<TrainResult> Train(const TrainerConfig& config, const ParallelState& parallel,
                                  std::ostream& progress);

}  // namespace tetra

#endif  // TETRA_TRAIN_TRAINER_H_
