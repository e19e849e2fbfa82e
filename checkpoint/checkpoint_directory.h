// Checkpoint directory management: the step directories under
// checkpoint.dir, durable writes (fsync of files and directories), the atomic
// commit of a finished checkpoint (step_NNNNNNNN.tmp renamed to
// step_NNNNNNNN after its completion marker is on disk), which checkpoint a
// resume starts from, and retention of the newest `keep`. A crash (kill -9)
// at any moment leaves either the new complete checkpoint or the previous one.
// Also the plain file reads of checkpoint files: regular files only, never
// more bytes than the file holds.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_DIRECTORY_H_
#define TETRA_CHECKPOINT_CHECKPOINT_DIRECTORY_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tetra {

// "step_00000120"
std::string StepDirName(int64_t step);
// The step a directory named step_N holds (N all digits: no sign, no
// suffix), else nullopt.
std::optional<int64_t> StepOfDirName(const std::string& name);
// `root`/step_N, and `root`/step_N.tmp where it is written before the commit.
std::string StepDir(const std::string& root, int64_t step);
std::string TemporaryStepDir(const std::string& root, int64_t step);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // the completion marker is present
};

// The step directories under `root` (not the .tmp ones), ascending by step;
// empty when `root` does not exist. A `root` that cannot be listed, or a
// step_N entry that is not a readable directory (a file, a dangling link, a
// symlink loop), is a UserError naming it.
absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root);

// The newest complete checkpoint under `root`, or nullopt when there is none.
// Each newer incomplete one it passes over is named in a line to `notes`.
absl::StatusOr<std::optional<CheckpointEntry>> NewestCompleteCheckpoint(const std::string& root,
                                                                        std::ostream& notes);

// Writes `size` bytes as the file at `path`, whole and on disk
// (core/atomic_file.h), with checkpoint.dir's hint on failure.
absl::Status WriteFileDurably(const std::string& path, const void* data, size_t size);

// Creates an empty TemporaryStepDir (removing a stale one from a crashed save).
absl::StatusOr<std::string> CreateTemporaryStepDir(const std::string& root, int64_t step);
// Syncs `tmp_dir`, renames it to `root`/step_N (replacing an older one of the
// same step) and syncs `root`. Returns the final path.
absl::StatusOr<std::string> CommitStepDir(const std::string& tmp_dir, const std::string& root,
                                          int64_t step);

// Removes all but the newest `keep` complete checkpoints (keep 0: none
// removed) and leftover .tmp directories of crashed saves.
absl::Status RemoveOldCheckpoints(const std::string& root, int keep);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_DIRECTORY_H_
