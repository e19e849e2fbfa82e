#include "train/checkpoint_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "train/checkpoint_format.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

constexpr char kStepPrefix[] = "step_";
constexpr char kTemporarySuffix[] = ".tmp";

absl::Status IoError(const std::string& what, const std::string& path) {
  return UserError(absl::StrCat(what, " ", path, " failed: ", std::strerror(errno)),
                   "check that checkpoint.dir is on a writable file system with free space",
                   absl::StatusCode::kDataLoss);
}

absl::Status FilesystemError(const std::string& what, const std::error_code& error) {
  return UserError(absl::StrCat(what, ": ", error.message()),
                   "check that checkpoint.dir is on a writable file system with free space",
                   absl::StatusCode::kDataLoss);
}

// The step of a directory named step_N (no suffix), else nullopt.
std::optional<int64_t> StepOf(const std::string& name) {
  const std::string prefix = kStepPrefix;
  int64_t step;
  if (name.rfind(prefix, 0) != 0 || !absl::SimpleAtoi(name.substr(prefix.size()), &step)) {
    return std::nullopt;
  }
  return step;
}

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrFormat("%s%08d", kStepPrefix, step); }

std::string StepDir(const std::string& root, int64_t step) {
  return (fs::path(root) / StepDirName(step)).string();
}

std::string TemporaryStepDir(const std::string& root, int64_t step) {
  return StepDir(root, step) + kTemporarySuffix;
}

std::vector<CheckpointEntry> ListCheckpoints(const std::string& root) {
  std::vector<CheckpointEntry> entries;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::optional<int64_t> step = StepOf(entry.path().filename().string());
    if (!step || !entry.is_directory()) continue;
    entries.push_back({*step, entry.path().string(),
                       fs::exists(entry.path() / kCompleteMarkerName)});
  }
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return entries;
}

std::optional<CheckpointEntry> NewestCompleteCheckpoint(const std::string& root,
                                                        std::ostream& notes) {
  std::vector<CheckpointEntry> entries = ListCheckpoints(root);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->complete) return *it;
    notes << "tetra: checkpoint " << it->path << " is incomplete (no " << kCompleteMarkerName
          << " marker: its save was interrupted); falling back to an older one\n";
  }
  return std::nullopt;
}

absl::Status WriteFileDurably(const std::string& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("creating", path);
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      const absl::Status status = IoError("writing", path);
      ::close(fd);
      return status;
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  if (::fsync(fd) != 0) {
    const absl::Status status = IoError("fsync of", path);
    ::close(fd);
    return status;
  }
  if (::close(fd) != 0) return IoError("closing", path);
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("opening directory", path);
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) return IoError("fsync of directory", path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> CreateTemporaryStepDir(const std::string& root, int64_t step) {
  const fs::path tmp = TemporaryStepDir(root, step);
  std::error_code error;
  fs::remove_all(tmp, error);
  if (!error) fs::create_directories(tmp, error);
  if (error) return FilesystemError(absl::StrCat("creating checkpoint directory ", tmp.string()), error);
  return tmp.string();
}

absl::StatusOr<std::string> CommitStepDir(const std::string& tmp_dir, const std::string& root,
                                          int64_t step) {
  RETURN_IF_ERROR(SyncDirectory(tmp_dir));
  const fs::path final_dir = StepDir(root, step);
  std::error_code error;
  // A directory of the same step (an earlier run that went on past it) is
  // replaced: the new one is the state this run continues from.
  fs::remove_all(final_dir, error);
  if (!error) fs::rename(tmp_dir, final_dir, error);
  if (error) {
    return FilesystemError(absl::StrCat("renaming ", tmp_dir, " to ", final_dir.string()), error);
  }
  RETURN_IF_ERROR(SyncDirectory(root));
  return final_dir.string();
}

absl::Status RemoveOldCheckpoints(const std::string& root, int keep) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kStepPrefix, 0) == 0 && name.ends_with(kTemporarySuffix)) {
      fs::remove_all(entry.path(), error);
      if (error) return FilesystemError(absl::StrCat("removing ", entry.path().string()), error);
    }
  }
  if (keep <= 0) return absl::OkStatus();
  std::vector<CheckpointEntry> complete;
  for (CheckpointEntry& entry : ListCheckpoints(root)) {
    if (entry.complete) complete.push_back(std::move(entry));
  }
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    fs::remove_all(complete[i].path, error);
    if (error) return FilesystemError(absl::StrCat("removing ", complete[i].path), error);
  }
  return absl::OkStatus();
}

}  // namespace tetra
