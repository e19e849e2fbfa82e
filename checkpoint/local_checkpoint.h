// Copies of the newest state in host memory (checkpoint.local_dir, a tmpfs
// such as /dev/shm, on each machine its own), as NVRx's local checkpoints and
// Gemini keep them: cheap enough to take every few steps while the saves to
// checkpoint.dir, a shared file system, stay far apart.
//
// A copy is a checkpoint directory (checkpoint_format.h) under
// local_dir/HOST/run-XXXXXXXX/step_N (XXXXXXXX: the CRC-32C of checkpoint.dir's
// absolute path, so runs sharing a local_dir never take each other's
// copies): the manifest and marker on every host, and each
// rank's data file on its own host and on its backup rank's, the rank at the
// same place among the next host's ranks. A restart that lost one host finds
// every data file on the survivors: each host that lacks some (the new
// layout's hosts, a host that came back empty) receives them from a host that
// has them, and every rank then reads the copy on its own host as it would
// any checkpoint, under any layout.
#ifndef TETRA_CHECKPOINT_LOCAL_CHECKPOINT_H_
#define TETRA_CHECKPOINT_LOCAL_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_directory.h"
#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// Given each rank's host (comm/host_names.h), the rank that keeps a copy of
// each rank's data file: the one at the same place (modulo their count) among
// the ranks of the next host, hosts in the order of their first rank; -1
// for all when there is one host.
std::vector<int> BackupRanks(const std::vector<std::string>& hosts);

// local_dir/HOST/run-XXXXXXXX: where the run's copies on `host` are.
std::string LocalCopyDir(const CheckpointConfig& checkpoint, const std::string& host);

// The step of the newest complete copy on `host`, if any (what the launcher
// reports a restart resumes from, when newer than checkpoint.dir's).
std::optional<int64_t> NewestLocalStep(const CheckpointConfig& checkpoint, const std::string& host);

// Copies the state after `step` to checkpoint.local_dir: this rank's data
// file on its host and its backup's, and the manifest and marker on every
// host; then removes the host's other copies. Collective over the world;
// the same failure on every rank.
absl::Status SaveLocalCheckpoint(const TrainerConfig& config, int64_t step,
                                 const ParameterStore& store, const DistributedOptimizer& optimizer,
                                 const DistributedOptimizer* experts, const ParallelState& parallel,
                                 const std::vector<std::string>& hosts);

// The newest step of at least `min_step` whose copies on the job's hosts
// together hold every data file, made whole on every host (a host's first
// rank receives what its host lacks), as this host's directory of it; nullopt
// when there is none. Says on `progress` what it copied between hosts.
// Collective over `world`.
absl::StatusOr<std::optional<CheckpointEntry>> GatherLocalCheckpoint(
    const CheckpointConfig& checkpoint, int64_t min_step, Communicator& world,
    const std::vector<std::string>& hosts, std::ostream& progress);

// Frees the run's copies (a finished run's last step is in checkpoint.dir).
// Collective over `world`.
absl::Status RemoveLocalCheckpoints(const CheckpointConfig& checkpoint, Communicator& world,
                                    const std::vector<std::string>& hosts);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_LOCAL_CHECKPOINT_H_
