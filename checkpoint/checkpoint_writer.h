// Saving a checkpoint of a running job (layout in checkpoint_format.h). Every
// rank writes one data file with the shards it alone holds: its tensor-
// parallel slice of each weight and buffer (dp rank 0, first replica; routed
// experts from the first expert-data-parallel replica, each ep rank its own
// experts), and its AdamW moments (its ZeRO-1 pieces, or under ZeRO-0 all of
// them from the first replica), each with its place in the global tensor and
// a CRC-32C of its record and data. Rank 0 gathers the shard records, writes
// the manifest and then the completion marker holding the manifest's
// CRC-32C, and commits the directory by an atomic rename
// (checkpoint_directory.h).
#ifndef TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_
#define TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// Whether to save after `step` of a run of `last_step` steps: checkpoint.dir
// set and step a multiple of checkpoint.interval, or the last step.
inline bool CheckpointDue(const CheckpointConfig& checkpoint, int64_t step, int64_t last_step) {
  if (checkpoint.dir().empty()) return false;
  return (checkpoint.interval() > 0 && step % checkpoint.interval() == 0) || step == last_step;
}

// Saves the state after optimizer step `step` to
// config.checkpoint.dir/step_<8 digits> and keeps the newest
// checkpoint.keep: weights, buffers (MoE correction biases), and the moments
// of `optimizer` (dense weights) and `experts` (routed experts' weights, null
// without them). Collective over the world; returns the directory on every
// rank, or the same failure on every rank.
absl::StatusOr<std::string> SaveCheckpoint(const TrainerConfig& config, int64_t step,
                                           const ParameterStore& store,
                                           const DistributedOptimizer& optimizer,
                                           const DistributedOptimizer* experts,
                                           const ParallelState& parallel);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_
