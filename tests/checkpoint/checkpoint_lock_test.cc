// CheckpointLock in one process: flock locks belong to open file
// descriptions, so a second Acquire here meets the first as another job
// would. The holder is named, a stale lock file is taken over saying so, and
// releasing removes the file.
#include "checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using ::tetra::testing::Message;
using ::tetra::testing::ReadBytes;
using ::tetra::testing::UserErrorShape;
using ::tetra::testing::WriteBytes;
namespace fs = std::filesystem;

class CheckpointLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tetra::testing::ScratchDir("checkpoint_lock_test") + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/ckpt";
  }
  std::string LockPath() const { return dir_ + "/" + kLockFileName; }

  std::string dir_;
  std::ostringstream notes_;
};

TEST_F(CheckpointLockTest, SecondHolderIsRefusedNamingTheFirst) {
  absl::StatusOr<CheckpointLock> first = CheckpointLock::Acquire(dir_, notes_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->path(), LockPath());
  EXPECT_THAT(ReadBytes(LockPath()), StartsWith("host "));
  EXPECT_THAT(ReadBytes(LockPath()), HasSubstr("\npid " + std::to_string(getpid()) + "\nstarted "));

  absl::StatusOr<CheckpointLock> second = CheckpointLock::Acquire(dir_, notes_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(second.status()),
              HasSubstr("checkpoint.dir " + dir_ + " is in use by another tetra job (pid \"" +
                        std::to_string(getpid()) + "\" on host \""));
  EXPECT_THAT(Message(second.status()), UserErrorShape());
  EXPECT_TRUE(fs::exists(LockPath()));  // the refused one leaves the holder's file alone

  // A moved lock is released once, by its last owner.
  std::optional<CheckpointLock> moved(*std::move(first));
  moved.reset();
  EXPECT_FALSE(fs::exists(LockPath()));
  EXPECT_TRUE(CheckpointLock::Acquire(dir_, notes_).ok());
  EXPECT_THAT(notes_.str(), IsEmpty());
}

TEST_F(CheckpointLockTest, StaleLockFileIsTakenOverSayingSo) {
  fs::create_directories(dir_);
  WriteBytes(LockPath(), "host node9\npid 31337\nstarted 2026-01-01 00:00:00 UTC\n");
  absl::StatusOr<CheckpointLock> lock = CheckpointLock::Acquire(dir_, notes_);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(notes_.str(),
            "tetra: taking over the lock " + LockPath() +
                " of pid \"31337\" on host \"node9\", started \"2026-01-01 00:00:00 UTC\", which "
                "ended without releasing it\n");
  EXPECT_THAT(ReadBytes(LockPath()), HasSubstr("\npid " + std::to_string(getpid()) + "\n"));
}

// A holder whose file says anything at all (here 5000 bytes of no lines
// tetra writes) is quoted in bounded size.
TEST_F(CheckpointLockTest, HolderTextIsQuotedInBoundedSize) {
  fs::create_directories(dir_);
  WriteBytes(LockPath(), std::string(5000, '\x01'));
  const int fd = ::open(LockPath().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const absl::Status status = CheckpointLock::Acquire(dir_, notes_).status();
  ::close(fd);
  EXPECT_THAT(Message(status), HasSubstr("(a holder its text does not name: \"\\x01\\x01"));
  EXPECT_THAT(Message(status), HasSubstr("... (1024 bytes)"));
  EXPECT_LT(Message(status).size(), 1000u);
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST_F(CheckpointLockTest, UncreatableDirectoryIsAnError) {
  fs::create_directories(dir_);
  WriteBytes(dir_ + "/file", "x");  // nothing can be created under a file, even by root
  const absl::Status status = CheckpointLock::Acquire(dir_ + "/file/sub", notes_).status();
  EXPECT_THAT(Message(status),
              HasSubstr("cannot create checkpoint.dir " + dir_ + "/file/sub: Not a directory"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

}  // namespace
}  // namespace tetra
