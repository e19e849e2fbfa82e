// `tetra plan --config F --world N [--json] [--gpus-per-node G] [--set ...]`:
// lays out N ranks by the config's `parallel { ... }` (parallel/mesh.h) and
// prints every rank's coordinates, node and local GPU, and every group, so a
// layout can be checked before a job is queued. Layouts that would perform
// badly (a tensor group across nodes, ...) get warnings on stderr. With
// parallel.pipeline > 1 the text plan also draws the configured pipeline
// schedule (pipeline/schedule.h), checked, as a timeline per pipeline rank with
// its bubble fraction and peak live activations; a schedule the config cannot
// run (micro-batches, layers, virtual stages) is an error. --json holds the
// layout only.
#ifndef TETRA_TOOLS_PLAN_COMMAND_H_
#define TETRA_TOOLS_PLAN_COMMAND_H_

#include "absl/status/status.h"

namespace tetra {

// Runs `tetra plan` on argv[2..argc); writes the plan to stdout.
absl::Status PlanCommand(int argc, char** argv);

}  // namespace tetra

#endif  // TETRA_TOOLS_PLAN_COMMAND_H_
