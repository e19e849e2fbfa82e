// Resuming a run from a checkpoint, under the layout that wrote it or any
// other with the same model: each rank reads the boxes of the global tensors
// its own parameters are (weights by tensor-parallel slice and pipeline
// stage, routed experts by expert-parallel rank) and the elements of the
// AdamW moments it updates (its ZeRO-1 pieces or all of them), mapping flat
// ranges to global element indices through the parameter names. The step
// then fixes the LR schedule and the data position (samples and
// initialisation are pure functions of (seed, index)).
#ifndef TETRA_CHECKPOINT_CHECKPOINT_RESUME_H_
#define TETRA_CHECKPOINT_CHECKPOINT_RESUME_H_

#include <cstdint>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_reader.h"
#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// Loads this rank's weights, buffers (MoE correction biases) and the moments
// of `optimizer` (dense weights) and `experts` (routed experts, null without
// them) from `reader`. A tensor the model has but the checkpoint lacks, or
// has with another global shape, is an error naming both; on error the model
// may be partly loaded.
absl::Status RestoreCheckpoint(const CheckpointReader& reader, ParameterStore& store,
                               const DistributedOptimizer& optimizer,
                               const DistributedOptimizer* experts);

// With checkpoint.dir set and checkpoint.resume true, loads the newest
// complete checkpoint under it (saying so on `progress`, and naming every
// newer incomplete one passed over) and returns its step; 0 when there is
// none. Collective over the world: every rank gets the same result.
absl::StatusOr<int64_t> ResumeFromCheckpoint(const TrainerConfig& config, ParameterStore& store,
                                             const DistributedOptimizer& optimizer,
                                             const DistributedOptimizer* experts,
                                             const ParallelState& parallel, std::ostream& progress);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_RESUME_H_
