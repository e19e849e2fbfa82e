// MappedFile::ReadRange on a file truncated under its mapping: past the new
// end's page the read faults (SIGBUS) and inside it the bytes read as zeros;
// both must be an error naming the file, and the process must survive. A
// fault outside ReadRange still kills the process as before.
#include "core/mapped_file.h"

#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

// Spans several pages whatever the page size (4 KiB to 64 KiB).
constexpr int64_t kFileBytes = 4 << 20;

std::string MakeFile(const std::string& name) {
  const std::string path = testing::ScratchDir("mapped_file_test") + "/" + name;
  std::string bytes(kFileBytes, '\0');
  for (int64_t i = 0; i < kFileBytes; ++i) bytes[i] = static_cast<char>('a' + i % 26);
  testing::WriteBytes(path, bytes);
  return path;
}

// Copies [offset, offset + size) through ReadRange.
absl::Status Copy(const MappedFile& file, int64_t offset, int64_t size, std::vector<char>* out) {
  out->assign(size, 0);
  return file.ReadRange(offset, size,
                        [&](const uint8_t* src) { std::memcpy(out->data(), src, size); });
}

TEST(MappedFileTest, ReadsInsideTheFile) {
  const std::string path = MakeFile("whole.bin");
  absl::StatusOr<MappedFile> file = MappedFile::Open(path, "token file", "hint");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), kFileBytes);
  std::vector<char> out;
  ASSERT_TRUE(Copy(*file, 1000, 3, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "mno");  // 1000 % 26 = 12
}

TEST(MappedFileTest, ATruncatedFileIsAnErrorNamingItNotASigbus) {
  const std::string path = MakeFile("truncated.bin");
  absl::StatusOr<MappedFile> file = MappedFile::Open(path, "token file", "hint");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<char> out;
  ASSERT_TRUE(Copy(*file, kFileBytes - 8, 8, &out).ok());
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  // Pages past the new end: the read faults.
  absl::Status status = Copy(*file, kFileBytes - 8, 8, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("token file " + path +
                                         " shrank from 4194304 to 100 bytes "
                                         "while tetra was reading it: bytes [4194296, 4194304) "
                                         "are gone"));
  EXPECT_THAT(Message(status), UserErrorShape());
  // Again, and on another thread: each read is guarded on its own.
  std::thread([&] { EXPECT_FALSE(Copy(*file, 1 << 20, 8, &out).ok()); }).join();
  EXPECT_FALSE(Copy(*file, kFileBytes - 8, 8, &out).ok());
  // Inside the first page, past the new end: zeros, no fault; still an error.
  EXPECT_THAT(Message(Copy(*file, 200, 8, &out)), HasSubstr("bytes [200, 208) are gone"));
  // What is still there reads.
  ASSERT_TRUE(Copy(*file, 0, 100, &out).ok());
  EXPECT_EQ(out[99], 'a' + 99 % 26);
}

TEST(MappedFileDeathTest, AFaultOutsideAGuardedReadStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = MakeFile("unguarded.bin");
  absl::StatusOr<MappedFile> file = MappedFile::Open(path, "token file", "hint");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  const volatile uint8_t* last = file->data() + kFileBytes - 1;
  EXPECT_DEATH((void)*last, "");
}

}  // namespace
}  // namespace tetra
