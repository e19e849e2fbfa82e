// CheckRankMemory: before a run (or `tetra export`) builds its model, what one
// rank will hold against what this machine has left, so a model that cannot
// fit is refused at start-up with the numbers, not killed in an allocation
// (or by the OOM killer) minutes later. The need is the layout planner's
// estimate (plan/layout_planner.h: the stage that needs most, its weights,
// gradients, AdamW moments and activations) in this run's dtypes, plus the
// synthetic token stream every rank generates; what the machine has is
// MemAvailable, or less where the memory cgroup's limit leaves less, and with
// train.device CUDA the free memory of the rank's GPU.
#ifndef TETRA_PLAN_MEMORY_CHECK_H_
#define TETRA_PLAN_MEMORY_CHECK_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "plan/layout_planner.h"
#include "proto/config.pb.h"

namespace tetra {

// What the caller is about to build.
enum class MemoryUse {
  kTraining,  // the model, its optimizer and activations, and the training data
  kWeights,   // the model's weights and gradients only (tetra export)
};

// What this machine has for the ranks on it; a size it could not read is
// nullopt, and that check is skipped.
struct MachineMemory {
  std::optional<double> host_bytes;  // shared by host_ranks ranks
  std::string host_source;           // where host_bytes comes from, for the message
  int host_ranks = 1;
  std::optional<double> device_bytes;  // free on this rank's GPU (train.device CUDA)
  int device_ranks = 1;                // ranks sharing that GPU (the staged backend's tests)
  std::string device_name;             // e.g. "GPU 0 (NVIDIA H200)"
};

// Reads this machine's memory for `host_ranks` ranks, and with `gpu` the
// current GPU's (a CUDA build; the rank's device must be current), shared by
// `host_ranks` / the machine's GPUs ranks, rounded up.
MachineMemory ReadMachineMemory(int host_ranks, bool gpu);

// A UserError when this rank's share of `config` under `layout` (sizes of the
// tensor, context, pipeline, data and expert axes; ZeRO stage) needs more
// than `machine` has.
absl::Status CheckRankMemory(const TrainerConfig& config, const PlanLayout& layout, MemoryUse use,
                             const MachineMemory& machine);

}  // namespace tetra

#endif  // TETRA_PLAN_MEMORY_CHECK_H_
