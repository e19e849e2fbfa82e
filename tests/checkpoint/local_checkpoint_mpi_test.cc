// A restart that lost hosts finds the copies in memory (checkpoint.local_dir)
// on the survivors: the hosts here are names given to the ranks, their
// memory a directory each. Every rank's data file is on its own host and its
// backup's (BackupRanks), as SaveLocalCheckpoint leaves them; one host is
// then lost and its ranks come back on a new, empty one. GatherLocalCheckpoint
// must make every host's copy whole, byte for byte, from the survivors, and
// find none where two neighbouring hosts are lost (each file's two copies),
// and none of another run's (another checkpoint.dir) in the same local_dir.
// Runs under mpirun with 2, 4 and 8 ranks: 2 or 3 hosts.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/local_checkpoint.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kStep = 5;

std::string DataOf(int rank) {
  return std::string(1000 + 37 * rank, static_cast<char>('a' + rank));
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

class LocalCheckpointMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = MpiWorld(60);
    n_ = world_->size();
    std::string dir;
    if (world_->rank() == 0) {
      char name[] = "/tmp/tetra_local_ckpt_XXXXXX";
      dir = mkdtemp(name);
    }
    root_ = AllGatherStrings(*world_, dir)[0];
    checkpoint_.set_dir(root_ + "/ckpt");
    checkpoint_.set_local_dir(root_ + "/shm");
    for (int r = 0; r < n_; ++r) hosts_.push_back(absl::StrCat("h", r * Hosts() / n_));
  }
  void TearDown() override {
    world_->Barrier();
    if (world_->rank() == 0) fs::remove_all(root_);
  }
  int Hosts() const { return n_ == 2 ? 2 : 3; }
  std::string StepDirOn(const std::string& host) const {
    return StepDir(LocalCopyDir(checkpoint_, host), kStep);
  }

  // What SaveLocalCheckpoint leaves: on every host the manifest and marker,
  // each rank's data file on its host and its backup's.
  void SaveCopies() {
    CheckpointManifest manifest;
    manifest.set_format_version(kCheckpointFormatVersion);
    manifest.mutable_state()->set_step(kStep);
    for (int r = 0; r < n_; ++r) manifest.add_files(RankFileName(r));
    const std::string bytes = manifest.SerializeAsString();
    const int rank = world_->rank();
    const std::string mine = StepDirOn(hosts_[rank]);
    if (hosts_[rank] != (rank == 0 ? "" : hosts_[rank - 1])) {
      WriteFile(absl::StrCat(mine, "/", kManifestFileName), bytes);
      WriteFile(absl::StrCat(mine, "/", kCompleteMarkerName), CompleteMarkerText(kStep, bytes));
    }
    WriteFile(absl::StrCat(mine, "/", RankFileName(rank)), DataOf(rank));
    const int backup = BackupRanks(hosts_)[rank];
    WriteFile(absl::StrCat(StepDirOn(hosts_[backup]), "/", RankFileName(rank)), DataOf(rank));
    world_->Barrier();
  }

  // Host `lost` is gone with its memory; its ranks are on `replacement` now.
  std::vector<std::string> Lose(const std::string& lost, const std::string& replacement) {
    world_->Barrier();
    if (world_->rank() == 0) fs::remove_all(LocalCopyDir(checkpoint_, lost));
    world_->Barrier();
    std::vector<std::string> hosts = hosts_;
    for (std::string& host : hosts) {
      if (host == lost) host = replacement;
    }
    return hosts;
  }

  std::unique_ptr<Communicator> world_;
  int n_ = 0;
  std::string root_;
  CheckpointConfig checkpoint_;
  std::vector<std::string> hosts_;
};

TEST_F(LocalCheckpointMpiTest, ALostHostsFilesComeFromTheSurvivors) {
  SaveCopies();
  const std::vector<std::string> hosts = Lose("h1", "new");
  std::ostringstream progress;
  const absl::StatusOr<std::optional<CheckpointEntry>> found =
      GatherLocalCheckpoint(checkpoint_, 0, *world_, hosts, progress);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, kStep);
  const std::string mine = StepDirOn(hosts[world_->rank()]);
  EXPECT_EQ((*found)->path, mine);
  world_->Barrier();
  // The copy on this rank's host is whole: every data file, and a manifest
  // whose marker matches.
  for (int r = 0; r < n_; ++r) {
    EXPECT_EQ(ReadFile(absl::StrCat(mine, "/", RankFileName(r))), DataOf(r)) << "rank " << r;
  }
  EXPECT_TRUE(ReadManifest(mine).ok()) << ReadManifest(mine).status();
  // Every host lacked some files (the survivors each hold their own and their
  // backups'), the new one all of them.
  if (world_->rank() == 0) {
    EXPECT_NE(
        progress.str().find(Hosts() == 2 ? "sent to host new," : "sent to hosts h0, h2, new,"),
        std::string::npos)
        << progress.str();
  }
}

TEST_F(LocalCheckpointMpiTest, NoneWhenTheFileSystemsCheckpointIsNewer) {
  SaveCopies();
  std::ostringstream progress;
  const absl::StatusOr<std::optional<CheckpointEntry>> found =
      GatherLocalCheckpoint(checkpoint_, kStep + 1, *world_, hosts_, progress);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

TEST_F(LocalCheckpointMpiTest, NoneWhenBothCopiesOfAFileAreLost) {
  if (Hosts() < 3) GTEST_SKIP() << "two hosts hold each file's only two copies";
  SaveCopies();
  Lose("h1", "new1");
  const std::vector<std::string> hosts = Lose("h2", "new2");
  std::vector<std::string> renamed = hosts;
  for (int r = 0; r < n_; ++r) {
    if (hosts_[r] == "h1") renamed[r] = "new1";
  }
  std::ostringstream progress;
  const absl::StatusOr<std::optional<CheckpointEntry>> found =
      GatherLocalCheckpoint(checkpoint_, 0, *world_, renamed, progress);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

TEST_F(LocalCheckpointMpiTest, AnotherRunsCopiesAreNoCopies) {
  SaveCopies();
  CheckpointConfig other = checkpoint_;
  other.set_dir(root_ + "/other_ckpt");
  std::ostringstream progress;
  const absl::StatusOr<std::optional<CheckpointEntry>> found =
      GatherLocalCheckpoint(other, 0, *world_, hosts_, progress);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

TEST_F(LocalCheckpointMpiTest, ACopyWithoutItsMarkerIsNoCopy) {
  SaveCopies();
  world_->Barrier();
  if (world_->rank() == 0) {
    for (int h = 0; h < Hosts(); ++h) {
      fs::remove(absl::StrCat(StepDirOn(absl::StrCat("h", h)), "/", kCompleteMarkerName));
    }
  }
  world_->Barrier();
  std::ostringstream progress;
  const absl::StatusOr<std::optional<CheckpointEntry>> found =
      GatherLocalCheckpoint(checkpoint_, 0, *world_, hosts_, progress);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

}  // namespace
}  // namespace tetra
