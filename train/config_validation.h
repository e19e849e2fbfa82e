// ValidateConfig: every constraint on a TrainerConfig in one place. Each error
// is one sentence with the numbers involved and a hint line with the fix.
#ifndef TETRA_TRAIN_CONFIG_VALIDATION_H_
#define TETRA_TRAIN_CONFIG_VALIDATION_H_

#include "absl/status/status.h"
#include "proto/config.pb.h"

namespace tetra {

absl::Status ValidateConfig(const TrainerConfig& config, int world_size = 1);

}  // namespace tetra

#endif  // TETRA_TRAIN_CONFIG_VALIDATION_H_
