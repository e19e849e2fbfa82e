// ValidateConfig: every constraint on a TrainerConfig in one place. Each error
// is one sentence with the numbers involved and a hint line with the fix.
#ifndef TETRA_TRAIN_CONFIG_VALIDATION_H_
#define TETRA_TRAIN_CONFIG_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/config.pb.h"

namespace tetra {

// Every constraint on a run of `world_size` ranks.
absl::Status ValidateConfig(const TrainerConfig& config, int world_size = 1);

// What a valid config does that its author may not expect (a recipe shortened
// below its warmup, ...): one sentence each, printed once at start.
std::vector<std::string> ConfigWarnings(const TrainerConfig& config);

// The part of ValidateConfig the layout planner needs (the model, the sample
// shape, parallel's numbers), for `tetra plan --cluster` and `tetra report`,
// which predict layouts of any world size and read nothing else of a run.
absl::Status ValidatePlannerInputs(const TrainerConfig& config);

}  // namespace tetra

#endif  // TETRA_TRAIN_CONFIG_VALIDATION_H_
