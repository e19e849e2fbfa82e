// Every path tetra reads (config, cluster file, data, weights, checkpoint
// manifest) refuses a FIFO, a directory and a device with an error naming the
// path and what it is, and never blocks: all of them open through
// core/input_file.h. The null device reads as an empty file, so `--config
// /dev/null` keeps meaning "all defaults".
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/safetensors.h"
#include "core/input_file.h"
#include "data/token_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/cluster_config.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"
#include "train/config_loader.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

std::string TempPath(const std::string& name) {
  return testing::ScratchDir("input_paths_test") + "/" + name;
}

// A FIFO at `path` with a child process blocked opening it for writing, and
// exiting as soon as it gets in: a reader that opens the FIFO without
// O_NONBLOCK is then released (and reads it as empty) instead of blocking the
// test forever. The child is killed when this goes out of scope.
class FifoWithWriter {
 public:
  explicit FifoWithWriter(const std::string& path) {
    std::filesystem::remove(path);
    EXPECT_EQ(mkfifo(path.c_str(), 0644), 0) << path;
    child_ = fork();
    if (child_ == 0) {
      const int fd = open(path.c_str(), O_WRONLY);
      _exit(fd >= 0 ? 0 : 1);
    }
  }
  ~FifoWithWriter() {
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
  }

 private:
  pid_t child_;
};

struct Reader {
  std::string name;
  // Reads `path` the way tetra reads that kind of file; the error if any.
  std::function<absl::Status(const std::string& path)> read;
};

const std::vector<Reader>& Readers() {
  static const auto* readers = new std::vector<Reader>{
      {"config", [](const std::string& p) { return LoadConfigFile(p).status(); }},
      {"cluster", [](const std::string& p) { return LoadClusterFile(p).status(); }},
      {"weights", [](const std::string& p) { return SafetensorsFile::Open(p).status(); }},
      {"llmc", [](const std::string& p) { return OpenTokenFiles(DataConfig::LLMC, p).status(); }},
      {"megatron_idx",
       [](const std::string& p) {
         return OpenTokenFiles(DataConfig::MEGATRON, p + ".idx").status();
       }},
  };
  return *readers;
}

TEST(InputPathsTest, AFifoIsRefusedWithoutBlocking) {
  for (const Reader& reader : Readers()) {
    SCOPED_TRACE(reader.name);
    // Megatron opens <prefix>.idx for the prefix `path`.
    const std::string path = TempPath("fifo_" + reader.name);
    FifoWithWriter fifo(reader.name == "megatron_idx" ? path + ".idx" : path);
    const absl::Status status = reader.read(path);
    EXPECT_THAT(Message(status), HasSubstr(" is a FIFO (named pipe), not a regular file"));
    EXPECT_THAT(Message(status), HasSubstr(path));
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  // A checkpoint manifest is <dir>/manifest.pb.
  const std::string dir = TempPath("fifo_checkpoint");
  std::filesystem::create_directories(dir);
  FifoWithWriter fifo(dir + "/" + kManifestFileName);
  EXPECT_THAT(Message(ReadManifest(dir).status()),
              HasSubstr("checkpoint manifest " + dir + "/manifest.pb is a FIFO (named pipe)"));
}

TEST(InputPathsTest, ADirectoryIsRefused) {
  const std::string dir = TempPath("a_directory");
  std::filesystem::create_directories(dir);
  std::filesystem::create_directories(dir + ".idx");
  for (const Reader& reader : Readers()) {
    SCOPED_TRACE(reader.name);
    const absl::Status status = reader.read(dir);
    EXPECT_THAT(Message(status), HasSubstr(" is a directory, not a regular file"));
    EXPECT_THAT(Message(status), HasSubstr(dir));
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  std::filesystem::create_directories(dir + "/" + kManifestFileName);
  EXPECT_THAT(Message(ReadManifest(dir).status()), HasSubstr("manifest.pb is a directory"));
}

TEST(InputPathsTest, ADeviceIsRefusedButTheNullDeviceReadsAsEmpty) {
  // /dev/zero never ends: reading it whole would never return.
  for (const Reader& reader : Readers()) {
    if (reader.name == "megatron_idx") continue;  // takes a prefix, not a device path
    SCOPED_TRACE(reader.name);
    const absl::Status status = reader.read("/dev/zero");
    EXPECT_THAT(Message(status), HasSubstr("/dev/zero is a character device, not a regular file"));
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  absl::StatusOr<TrainerConfig> config = LoadConfigFile("/dev/null");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->train().steps(), TrainerConfig().train().steps());
  absl::StatusOr<InputFile> null = InputFile::Open("/dev/null", "test file", "none");
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_EQ(null->size(), 0);
  EXPECT_EQ(*null->ReadAll(), "");
}

TEST(InputPathsTest, AMissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("missing.textproto");
  absl::StatusOr<InputFile> file = InputFile::Open(path, "config file", "pass --config");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(file.status()),
            "cannot read config file " + path + ": No such file or directory\nhint: pass --config");
}

TEST(InputPathsTest, ReadsARegularFileWholeAndInRanges) {
  const std::string path = TempPath("regular.txt");
  testing::WriteBytes(path, "0123456789");
  absl::StatusOr<InputFile> file = InputFile::Open(path, "test file", "none");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 10);
  EXPECT_EQ(*file->ReadAll(), "0123456789");
  EXPECT_EQ(*file->Read(3, 4), "3456");
  // A file that shrinks after Open is an error naming it, not a short read.
  ASSERT_EQ(truncate(path.c_str(), 5), 0);
  EXPECT_EQ(*file->CurrentSize(), 5);
  const absl::Status shrank = file->ReadAll().status();
  EXPECT_EQ(shrank.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(shrank), HasSubstr("test file " + path + " shrank from 10 to 5 bytes"));
  EXPECT_THAT(Message(shrank), UserErrorShape());
}

}  // namespace
}  // namespace tetra
