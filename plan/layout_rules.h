// Which layouts the trainer runs, for the layout planner: it proposes only
// these, and says for any other which rule it breaks. The same rules as
// train/config_validation.cc's checks of `parallel` (which the planner cannot
// call: train/ builds on plan/), stated for a mesh shape instead of a config.
// The planner's layouts use sequence parallelism wherever the trainer allows
// it (tp > 1 without MoE layers), so its rule on token rows applies there.
#ifndef TETRA_PLAN_LAYOUT_RULES_H_
#define TETRA_PLAN_LAYOUT_RULES_H_

#include "absl/status/status.h"
#include "parallel/mesh.h"
#include "proto/config.pb.h"

namespace tetra {

// OK when the trainer runs `config`'s model and batch on `mesh`, else a user
// error naming the rule and the numbers, with a hint line.
absl::Status CheckLayoutRuns(const TrainerConfig& config, const MeshShape& mesh);

}  // namespace tetra

#endif  // TETRA_PLAN_LAYOUT_RULES_H_
