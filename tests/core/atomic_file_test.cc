// Files written whole (core/atomic_file.h) and the output-path check every
// writer shares (core/file_type.h): a path naming a pipe, directory or device
// is refused and left as it is, never replaced by the rename into place.
#include "core/atomic_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "core/file_type.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

std::string Scratch(const std::string& name) {
  return testing::ScratchDir("atomic_file_test") + "/" + name;
}

TEST(AtomicFileTest, WritesTheBytesWholeAndLeavesNoTemporaryFile) {
  const std::string path = Scratch("whole.txt");
  ASSERT_TRUE(WriteFileAtomically(path, "first", "hint").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second", "hint").ok());
  EXPECT_EQ(testing::ReadBytes(path), "second");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Renaming over a FIFO (as over /dev/full, run as root) replaced it with a
// regular file.
TEST(AtomicFileTest, APipeIsRefusedAndLeftAPipe) {
  const std::string fifo = Scratch("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const absl::Status status = WriteFileAtomically(fifo, "bytes", "name a file to write");
  EXPECT_THAT(Message(status),
              HasSubstr("output " + fifo + " is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(Message(status), HasSubstr("\nhint: name a file to write"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_FALSE(fs::exists(fifo + ".tmp"));
}

TEST(AtomicFileTest, ADirectoryOrDeviceIsRefusedAndLeftAsItIs) {
  const std::string dir = Scratch("directory");
  fs::create_directories(dir);
  EXPECT_THAT(Message(WriteFileAtomically(dir, "bytes", "hint")),
              HasSubstr("output " + dir + " is a directory, not a regular file"));
  EXPECT_TRUE(fs::is_directory(dir));
  // The check reads the type only: /dev/null is never opened for writing here.
  EXPECT_THAT(Message(CheckOutputPath("/dev/null", "log.trace_path", "hint")),
              HasSubstr("log.trace_path /dev/null is a character device, not a regular file"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

// A pipe left under the temporary name would block the open for writing.
TEST(AtomicFileTest, APipeUnderTheTemporaryNameIsRefused) {
  const std::string path = Scratch("target.txt");
  ASSERT_EQ(mkfifo((path + ".tmp").c_str(), 0644), 0);
  EXPECT_THAT(Message(WriteFileAtomically(path, "bytes", "hint")),
              HasSubstr("temporary file " + path + ".tmp is a FIFO (named pipe)"));
  EXPECT_FALSE(fs::exists(path));
}

TEST(AtomicFileTest, NothingThereOrARegularFileOrALinkToOneIsAnOutput) {
  EXPECT_TRUE(CheckOutputPath(Scratch("absent"), "output", "hint").ok());
  const std::string file = Scratch("regular");
  testing::WriteBytes(file, "x");
  EXPECT_TRUE(CheckOutputPath(file, "output", "hint").ok());
  const std::string link = Scratch("link");
  fs::create_symlink(file, link);
  EXPECT_TRUE(CheckOutputPath(link, "output", "hint").ok());
}

}  // namespace
}  // namespace tetra
