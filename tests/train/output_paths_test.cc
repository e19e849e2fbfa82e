// The output checks on one rank: writable places pass and are left as they
// were (no probe file, an existing file untouched), and an unwritable one is
// an error naming the field and the path. Nothing can be created under a
// regular file, even by root (tests run as root).
#include "train/output_paths.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/self_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::ReadBytes;
using ::tetra::testing::UserErrorShape;
using ::tetra::testing::WriteBytes;
namespace fs = std::filesystem;

class OutputPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tetra::testing::ScratchDir("output_paths_test") + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(root_);
    WriteBytes(root_ + "/file", "a regular file");
  }
  std::vector<std::string> Names(const std::string& dir) {
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string root_;
};

TEST_F(OutputPathsTest, WritablePlacesPassAndAreLeftAsTheyWere) {
  EXPECT_TRUE(CheckWritableDirectory("export_path", root_ + "/new/export").ok());
  EXPECT_TRUE(fs::is_directory(root_ + "/new/export"));
  EXPECT_TRUE(Names(root_ + "/new/export").empty());  // the probe is gone
  EXPECT_TRUE(CheckWritableFile("log.metrics_path", root_ + "/logs/metrics.jsonl").ok());
  EXPECT_TRUE(Names(root_ + "/logs").empty());  // created to check, then removed
  EXPECT_TRUE(CheckWritableFile("log.metrics_path", root_ + "/file").ok());
  EXPECT_EQ(ReadBytes(root_ + "/file"), "a regular file");
}

TEST_F(OutputPathsTest, UnwritablePlacesAreErrorsNamingFieldAndPath) {
  const std::string under_file = root_ + "/file/sub";
  absl::Status status = CheckWritableDirectory("log.tensorboard_dir", under_file);
  EXPECT_THAT(Message(status), HasSubstr("log.tensorboard_dir " + under_file +
                                         " cannot be written: creating "
                                         "directory " +
                                         under_file + ": Not a directory"));
  EXPECT_THAT(Message(status), UserErrorShape());
  status = CheckWritableFile("log.trace_path", under_file + "/trace.json");
  EXPECT_THAT(Message(status),
              HasSubstr("log.trace_path " + under_file + "/trace.json cannot be written"));
  status = CheckWritableFile("log.metrics_path", root_);  // a directory
  EXPECT_THAT(Message(status),
              HasSubstr("log.metrics_path " + root_ + " is a directory, not a regular file"));
  EXPECT_THAT(Message(CheckWritableDirectory("export_path", "/proc/tetra_export")),
              HasSubstr("export_path /proc/tetra_export cannot be written"));
}

// A FIFO hung the check (opening it for writing waits for a reader), and a
// device would be replaced by the file written over it.
TEST_F(OutputPathsTest, APipeOrDeviceIsRefusedWithoutOpeningIt) {
  const std::string fifo = root_ + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  absl::Status status = CheckWritableFile("log.metrics_path", fifo);
  EXPECT_THAT(Message(status), HasSubstr("log.metrics_path " + fifo +
                                         " is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(Message(status), HasSubstr("\nhint: point log.metrics_path at a place"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_THAT(Message(CheckWritableFile("log.trace_path", "/dev/full")),
              HasSubstr("log.trace_path /dev/full is a character device, not a regular file"));
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST_F(OutputPathsTest, EveryOutputOfTheConfigIsChecked) {
  TrainerConfig config;
  config.set_export_path(root_ + "/export");
  config.mutable_log()->set_metrics_path(root_ + "/m/metrics.jsonl");
  config.mutable_log()->set_tensorboard_dir(root_ + "/tb");
  config.mutable_log()->set_trace_path(root_ + "/t/trace.json");
  config.mutable_checkpoint()->set_dir(root_ + "/ckpt");
  SelfCommunicator self;
  ASSERT_TRUE(CheckOutputsWritable(config, self).ok());
  EXPECT_THAT(Names(root_), ElementsAre("ckpt", "export", "file", "m", "t", "tb"));
  const std::string bad = root_ + "/file/x";
  const std::vector<std::pair<std::string, std::function<void(TrainerConfig&)>>> breaks = {
      {"export_path", [&](TrainerConfig& c) { c.set_export_path(bad); }},
      {"log.metrics_path", [&](TrainerConfig& c) { c.mutable_log()->set_metrics_path(bad); }},
      {"log.tensorboard_dir", [&](TrainerConfig& c) { c.mutable_log()->set_tensorboard_dir(bad); }},
      {"log.trace_path", [&](TrainerConfig& c) { c.mutable_log()->set_trace_path(bad); }},
      {"checkpoint.dir", [&](TrainerConfig& c) { c.mutable_checkpoint()->set_dir(bad); }},
  };
  for (const auto& [field, set] : breaks) {
    TrainerConfig broken = config;
    set(broken);
    EXPECT_THAT(Message(CheckOutputsWritable(broken, self)),
                HasSubstr(field + " " + bad + " cannot be written"));
  }
}

}  // namespace
}  // namespace tetra
