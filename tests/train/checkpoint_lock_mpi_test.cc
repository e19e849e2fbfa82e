// The start-up checks under several ranks: world rank 0 alone takes the lock
// of checkpoint.dir and every rank learns the outcome; an output location
// that fails on one rank (rank 0's export path, another rank's
// checkpoint.dir) fails every rank, the failing one naming the path.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint_lock.h"
#include "comm/mpi_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/output_paths.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class StartupChecksMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = MpiWorld(60);
    // One directory for every rank (they share this host): named by rank 0's pid.
    const int pid = static_cast<int>(MaxOverRanks(*world_, world_->rank() == 0 ? getpid() : 0));
    root_ = ::testing::TempDir() + "checkpoint_lock_mpi_test_" + std::to_string(pid) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (world_->rank() == 0) {
      fs::create_directories(root_);
      std::ofstream(root_ + "/file") << "a regular file";
    }
    world_->Barrier();
  }
  void TearDown() override {
    world_->Barrier();
    if (world_->rank() == 0) fs::remove_all(root_);
  }

  std::unique_ptr<Communicator> world_;
  std::string root_;
  std::ostringstream notes_;
};

TEST_F(StartupChecksMpiTest, RankZeroTakesTheLockAndEveryRankLearnsTheOutcome) {
  const std::string dir = root_ + "/ckpt";
  absl::StatusOr<std::optional<CheckpointLock>> first = LockCheckpointDir(dir, *world_, notes_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->has_value(), world_->rank() == 0);
  // A second job's start while the first holds it: every rank fails.
  absl::StatusOr<std::optional<CheckpointLock>> second = LockCheckpointDir(dir, *world_, notes_);
  ASSERT_FALSE(second.ok());
  if (world_->rank() == 0) {
    EXPECT_THAT(second.status().message(),
                HasSubstr("checkpoint.dir " + dir + " is in use by another tetra job"));
  } else {
    EXPECT_EQ(second.status().message(), "rank 0 failed (see its error above)");
  }
  first->reset();
  world_->Barrier();  // released before any rank tries again
  absl::StatusOr<std::optional<CheckpointLock>> third = LockCheckpointDir(dir, *world_, notes_);
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(LockCheckpointDir("", *world_, notes_).ok());  // no checkpoint.dir: nothing to lock
}

TEST_F(StartupChecksMpiTest, AnUnwritableOutputOnOneRankFailsEveryRank) {
  TrainerConfig config;
  config.mutable_checkpoint()->set_dir(root_ + "/ckpt");
  config.mutable_log()->set_metrics_path(root_ + "/metrics.jsonl");
  ASSERT_TRUE(CheckOutputsWritable(config, *world_).ok());

  // Rank 0 writes the export: only it finds the place unwritable.
  TrainerConfig export_under_file = config;
  export_under_file.set_export_path(root_ + "/file/export");
  const absl::Status exported = CheckOutputsWritable(export_under_file, *world_);
  ASSERT_FALSE(exported.ok());
  if (world_->rank() == 0) {
    EXPECT_THAT(exported.message(),
                HasSubstr("export_path " + root_ + "/file/export cannot be written"));
  }
  // Every rank writes shards to checkpoint.dir: the last rank alone fails here.
  const int last = world_->size() - 1;
  TrainerConfig mine = config;
  if (world_->rank() == last) mine.mutable_checkpoint()->set_dir(root_ + "/file/ckpt");
  const absl::Status checkpoint = CheckOutputsWritable(mine, *world_);
  ASSERT_FALSE(checkpoint.ok());
  if (world_->rank() == last) {
    EXPECT_THAT(checkpoint.message(),
                HasSubstr("checkpoint.dir " + root_ + "/file/ckpt cannot be written"));
  } else {
    EXPECT_EQ(checkpoint.message(),
              "rank " + std::to_string(last) + " failed (see its error above)");
  }
}

}  // namespace
}  // namespace tetra
