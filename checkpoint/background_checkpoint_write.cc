#include "checkpoint/background_checkpoint_write.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tetra {

BackgroundCheckpointWrite::BackgroundCheckpointWrite(CheckpointSnapshot snapshot)
    : snapshot_(std::move(snapshot)) {
  thread_ = std::thread([this] {
    status_ = WriteCheckpointData(snapshot_);
    done_.store(true, std::memory_order_release);
  });
}

BackgroundCheckpointWrite::~BackgroundCheckpointWrite() {
  if (thread_.joinable()) thread_.join();
}

absl::Status BackgroundCheckpointWrite::Wait() {
  if (thread_.joinable()) thread_.join();
  if (status_.ok()) return status_;
  return absl::Status(status_.code(),
                      absl::StrCat("checkpoint.async: the background write of step ",
                                   snapshot_.step, "'s checkpoint failed: ", status_.message()));
}

}  // namespace tetra
