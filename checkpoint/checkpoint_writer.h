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
//
// A save is three phases, so that the slow one can run beside training
// (checkpoint.async, train/checkpoint_policy.h): the snapshot (collective:
// the step's .tmp directory, this rank's shards and their records copied to
// host memory), the write (this rank alone, from any thread: the shards'
// CRCs, then its data file, durably) and the commit (collective: every
// rank's write agreed on, the records gathered, then rank 0's manifest,
// marker and rename). A synchronous save runs the three in a row, so both
// write the same bytes.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_
#define TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/parallel_state.h"
#include "proto/checkpoint.pb.h"
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

// One rank's part of a save between its snapshot and its commit.
struct CheckpointSnapshot {
  int64_t step = 0;
  std::string tmp_dir;         // root/step_N.tmp, where the files go before the commit
  std::string data_path;       // this rank's data file in tmp_dir
  std::string data;            // its bytes, until written
  CheckpointManifest records;  // only `tensors`, with this rank's shards
};

// This rank's shards of the state after `step`, in host memory: `records`
// and `data` set, no directory yet. Calls no collective.
CheckpointSnapshot CollectCheckpointShards(const TrainerConfig& config, int64_t step,
                                           const ParameterStore& store,
                                           const DistributedOptimizer& optimizer,
                                           const DistributedOptimizer* experts,
                                           const ParallelState& parallel);
// The snapshot phase of SaveCheckpoint. Collective over the world.
absl::StatusOr<CheckpointSnapshot> SnapshotCheckpoint(const TrainerConfig& config, int64_t step,
                                                      const ParameterStore& store,
                                                      const DistributedOptimizer& optimizer,
                                                      const DistributedOptimizer* experts,
                                                      const ParallelState& parallel);
// The write phase: the records' CRCs, and the data file, whole and on disk;
// frees snapshot.data.
// Calls no collective, so it may run on another thread.
absl::Status WriteCheckpointData(CheckpointSnapshot& snapshot);
// The serialized manifest of the save of `snapshot` (written, so its CRCs
// set) on every rank: every rank's records gathered. Collective over the world.
std::string GatherManifest(const TrainerConfig& config, const CheckpointSnapshot& snapshot,
                           const ParallelState& parallel);
// The commit phase, given this rank's write status: the same failure on
// every rank when any rank's write failed, else rank 0 commits and keeps the
// newest checkpoint.keep. Returns the directory. Collective over the world.
absl::StatusOr<std::string> CommitCheckpoint(const TrainerConfig& config,
                                             const CheckpointSnapshot& snapshot,
                                             const ParallelState& parallel, absl::Status written);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_WRITER_H_
