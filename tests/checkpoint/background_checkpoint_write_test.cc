// The write phase on its own thread: the data file as the synchronous write
// leaves it, and a failure reported by Wait naming the background write.
#include "checkpoint/background_checkpoint_write.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

CheckpointSnapshot Snapshot(const std::string& dir, const std::string& data) {
  CheckpointSnapshot snapshot;
  snapshot.step = 7;
  snapshot.tmp_dir = dir;
  snapshot.data_path = dir + "/rank_00000.bin";
  snapshot.data = data;
  return snapshot;
}

TEST(BackgroundCheckpointWriteTest, WritesTheDataFileAndFreesTheCopy) {
  const std::string dir = tetra::testing::ScratchDir("background_checkpoint_write_test") + "/ok";
  fs::create_directories(dir);
  const std::string data(100000, 'x');
  BackgroundCheckpointWrite write(Snapshot(dir, data));
  ASSERT_TRUE(write.Wait().ok());
  EXPECT_TRUE(write.done());
  EXPECT_TRUE(write.snapshot().data.empty());
  std::ostringstream written;
  written << std::ifstream(dir + "/rank_00000.bin", std::ios::binary).rdbuf();
  EXPECT_EQ(written.str(), data);
}

TEST(BackgroundCheckpointWriteTest, AFailureNamesTheBackgroundWriteAndStep) {
  const std::string dir =
      tetra::testing::ScratchDir("background_checkpoint_write_test") + "/missing/dir";
  fs::remove_all(dir);
  BackgroundCheckpointWrite write(Snapshot(dir, "data"));
  const absl::Status status = write.Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("checkpoint.async: the background write of step 7's checkpoint failed: "));
  EXPECT_THAT(status.message(), HasSubstr("rank_00000.bin"));
}

}  // namespace
}  // namespace tetra
