// Which layouts the trainer runs, for the layout planner: it proposes only
// these, and says for any other which rule it breaks. The same rules as
// train/config_validation.cc's checks of `parallel` (which the planner cannot
// call: train/ builds on plan/), stated for a mesh shape instead of a config.
// The planner's layouts use sequence parallelism wherever the trainer allows
// it (tp > 1 without MoE layers), so its rule on token rows applies there.
#ifndef TETRA_PLAN_LAYOUT_RULES_H_
#define TETRA_PLAN_LAYOUT_RULES_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/mesh.h"
#include "pipeline/schedule.h"
#include "proto/config.pb.h"

namespace tetra {

// The pipeline schedule `config` runs on `mesh`: its parallel.schedule and
// virtual_stages over mesh.pp stages and mesh.dp data-parallel ranks, as
// ScheduleSpecFromConfig maps them (its errors where that schedule cannot
// run there: e.g. interleaving needs the micro-batches a multiple of pp and
// the layers of pp x virtual_stages). One stage runs the one-stage table
// whatever the config's schedule (with virtual_stages 1: a run sets it so).
// parallel.pipeline_layers is kept only for the config's own pipeline size.
absl::StatusOr<ScheduleSpec> LayoutScheduleSpec(const TrainerConfig& config, const MeshShape& mesh);

// OK when the trainer runs `config`'s model and batch on `mesh`, else a user
// error naming the rule and the numbers, with a hint line.
absl::Status CheckLayoutRuns(const TrainerConfig& config, const MeshShape& mesh);

}  // namespace tetra

#endif  // TETRA_PLAN_LAYOUT_RULES_H_
