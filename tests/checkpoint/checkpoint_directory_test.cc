// Checkpoint directory management: names, which checkpoint a resume picks
// (skipping incomplete ones, saying so), the atomic commit and retention.
#include "checkpoint/checkpoint_directory.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;
namespace fs = std::filesystem;

class CheckpointDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tetra::testing::ScratchDir("checkpoint_directory_test") + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(root_);
  }
  // A step directory, with the completion marker when `complete`.
  void MakeStep(const std::string& name, bool complete) {
    fs::create_directories(root_ + "/" + name);
    if (complete) std::ofstream(root_ + "/" + name + "/COMPLETE") << "done\n";
  }
  std::vector<std::string> Names() {
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(root_))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string root_;
};

TEST_F(CheckpointDirectoryTest, StepDirectoryNamesHaveEightDigits) {
  EXPECT_EQ(StepDirName(120), "step_00000120");
  EXPECT_EQ(StepDirName(123456789), "step_123456789");
}

TEST_F(CheckpointDirectoryTest, ResumePicksTheNewestCompleteAndNamesSkippedOnes) {
  MakeStep("step_00000010", true);
  MakeStep("step_00000020", true);
  MakeStep("step_00000030", false);  // its save died before the marker
  MakeStep("step_00000040.tmp", false);
  MakeStep("notes", false);
  MakeStep("step_+50", true);  // not a name tetra writes
  MakeStep("step_", true);
  const absl::StatusOr<std::vector<CheckpointEntry>> entries = ListCheckpoints(root_);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].step, 10);
  EXPECT_EQ((*entries)[2].step, 30);
  EXPECT_FALSE((*entries)[2].complete);
  std::ostringstream notes;
  const absl::StatusOr<std::optional<CheckpointEntry>> newest =
      NewestCompleteCheckpoint(root_, notes);
  ASSERT_TRUE(newest.ok()) << newest.status();
  ASSERT_TRUE(newest->has_value());
  EXPECT_EQ((*newest)->step, 20);
  EXPECT_EQ((*newest)->path, root_ + "/step_00000020");
  EXPECT_THAT(notes.str(), HasSubstr(root_ + "/step_00000030 is incomplete"));
  std::ostringstream none;
  const absl::StatusOr<std::optional<CheckpointEntry>> missing =
      NewestCompleteCheckpoint(root_ + "/missing", none);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
}

// A step_N entry that is not a readable directory is damage, never passed
// over in silence (a resume would quietly start from an older step).
TEST_F(CheckpointDirectoryTest, StepEntryThatIsNoDirectoryIsAnError) {
  MakeStep("step_00000010", true);
  fs::create_directory_symlink("step_00000020", root_ + "/step_00000020");  // a loop
  std::ostringstream notes;
  absl::StatusOr<std::optional<CheckpointEntry>> newest = NewestCompleteCheckpoint(root_, notes);
  ASSERT_FALSE(newest.ok());
  EXPECT_THAT(Message(newest.status()), HasSubstr("checkpoint " + root_ +
                                                  "/step_00000020 is not a readable "
                                                  "directory: Too many levels of symbolic links"));
  EXPECT_THAT(Message(newest.status()), UserErrorShape());
  fs::remove(root_ + "/step_00000020");
  std::ofstream(root_ + "/step_00000020") << "a file";
  EXPECT_THAT(
      Message(ListCheckpoints(root_).status()),
      HasSubstr("checkpoint " + root_ + "/step_00000020 is not a readable directory\nhint: "));
  EXPECT_FALSE(RemoveOldCheckpoints(root_, 1).ok());
}

TEST_F(CheckpointDirectoryTest, RootThatCannotBeListedIsAnError) {
  fs::create_directory_symlink("loop", root_ + "/loop");
  std::ofstream(root_ + "/file") << "x";
  for (const std::string& root : {root_ + "/loop", root_ + "/file"}) {
    const absl::Status status = ListCheckpoints(root).status();
    EXPECT_THAT(Message(status), HasSubstr("cannot list checkpoint.dir " + root + ": ")) << root;
    EXPECT_THAT(Message(status), UserErrorShape());
  }
}

TEST_F(CheckpointDirectoryTest, CommitRenamesAndReplacesTheSameStep) {
  MakeStep("step_00000005", true);  // an older run's step 5
  absl::StatusOr<std::string> tmp = CreateTemporaryStepDir(root_, 5);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  EXPECT_EQ(*tmp, root_ + "/step_00000005.tmp");
  ASSERT_TRUE(WriteFileDurably(*tmp + "/data", "abc", 3).ok());
  absl::StatusOr<std::string> committed = CommitStepDir(*tmp, root_, 5);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(*committed, root_ + "/step_00000005");
  EXPECT_EQ(tetra::testing::ReadBytes(*committed + "/data"), "abc");
  EXPECT_FALSE(fs::exists(*committed + "/COMPLETE"));  // the new one replaced the old
  EXPECT_EQ(Names(), std::vector<std::string>{"step_00000005"});
}

TEST_F(CheckpointDirectoryTest, RetentionKeepsTheNewestCompleteAndDropsTemporaries) {
  for (const char* name : {"step_00000001", "step_00000002", "step_00000003"}) MakeStep(name, true);
  MakeStep("step_00000004", false);
  MakeStep("step_00000005.tmp", false);
  ASSERT_TRUE(RemoveOldCheckpoints(root_, 0).ok());  // keep 0: all complete ones stay
  EXPECT_EQ(Names(), (std::vector<std::string>{"step_00000001", "step_00000002", "step_00000003",
                                               "step_00000004"}));
  ASSERT_TRUE(RemoveOldCheckpoints(root_, 2).ok());
  EXPECT_EQ(Names(), (std::vector<std::string>{"step_00000002", "step_00000003", "step_00000004"}));
}

TEST_F(CheckpointDirectoryTest, UnwritablePlaceIsAUserError) {
  std::ofstream(root_ + "/file") << "x";
  absl::StatusOr<std::string> tmp = CreateTemporaryStepDir(root_ + "/file", 1);
  ASSERT_FALSE(tmp.ok());
  EXPECT_THAT(tmp.status().message(), HasSubstr(root_ + "/file/step_00000001.tmp"));
  EXPECT_THAT(tmp.status().message(), HasSubstr("\nhint: "));
}

}  // namespace
}  // namespace tetra
