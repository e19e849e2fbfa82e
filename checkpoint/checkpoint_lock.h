// The lock that keeps two jobs off one checkpoint.dir. Two jobs saving to one
// directory would resume from each other's checkpoints and remove each
// other's half-written saves; the second job is refused at start instead,
// with a message naming the first. The lock is an flock(2) on
// checkpoint.dir/tetra.lock, held for the whole run, whose text names the
// holder (host, pid, start time). The kernel releases an flock when its
// process ends, however it ends, so a lock file left by a killed job is
// stale by construction and is taken over, saying so; a clean exit removes
// the file.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_LOCK_H_
#define TETRA_CHECKPOINT_CHECKPOINT_LOCK_H_

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace tetra {

inline constexpr char kLockFileName[] = "tetra.lock";

class CheckpointLock {
 public:
  // Creates `dir` when missing and takes its lock. A lock held by a live
  // process is a UserError naming that process; a lock file of a process that
  // ended without releasing it is taken over with a line on `notes`.
  static absl::StatusOr<CheckpointLock> Acquire(const std::string& dir, std::ostream& notes);

  CheckpointLock(CheckpointLock&& other) noexcept;
  CheckpointLock& operator=(CheckpointLock&& other) noexcept;
  ~CheckpointLock();  // removes the lock file and releases the lock

  const std::string& path() const { return path_; }

 private:
  CheckpointLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Release();

  std::string path_;
  int fd_ = -1;
};

// Takes the lock of `dir` for the job: world rank 0, which writes the
// directory's own files (manifests, markers, commits), takes it and every
// rank learns the outcome, so all fail together. Collective over `world`.
// nullopt on the other ranks, and everywhere when `dir` is empty.
absl::StatusOr<std::optional<CheckpointLock>> LockCheckpointDir(const std::string& dir,
                                                                Communicator& world,
                                                                std::ostream& notes);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_LOCK_H_
