// The write phase of a save (checkpoint_writer.h) on a thread of its own, so
// that training goes on while this rank's data file goes to disk
// (checkpoint.async). Only the file write runs there: the snapshot and the
// commit call the communicator, whose calls come from one thread.
#ifndef TETRA_CHECKPOINT_BACKGROUND_CHECKPOINT_WRITE_H_
#define TETRA_CHECKPOINT_BACKGROUND_CHECKPOINT_WRITE_H_

#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "checkpoint/checkpoint_writer.h"

namespace tetra {

class BackgroundCheckpointWrite {
 public:
  // Starts writing `snapshot`'s data file.
  explicit BackgroundCheckpointWrite(CheckpointSnapshot snapshot);
  // Waits for the write (a run that fails with a save in flight still ends cleanly).
  ~BackgroundCheckpointWrite();
  BackgroundCheckpointWrite(const BackgroundCheckpointWrite&) = delete;
  BackgroundCheckpointWrite& operator=(const BackgroundCheckpointWrite&) = delete;

  // Whether the write has ended, well or not; never blocks.
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits for the write and returns how it went, a failure saying that it
  // was the background write of step N.
  absl::Status Wait();
  // The snapshot written (its data freed): after Wait only.
  const CheckpointSnapshot& snapshot() const { return snapshot_; }

 private:
  CheckpointSnapshot snapshot_;
  absl::Status status_;  // written by the thread before done_ is set
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_BACKGROUND_CHECKPOINT_WRITE_H_
