#include "checkpoint/checkpoint_directory.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_format.h"
#include "core/atomic_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

constexpr char kStepPrefix[] = "step_";
constexpr char kTemporarySuffix[] = ".tmp";

constexpr char kWritableHint[] =
    "check that checkpoint.dir is on a writable file system with free space";

absl::Status FilesystemError(const std::string& what, const std::error_code& error) {
  return UserError(absl::StrCat(what, ": ", error.message()), kWritableHint,
                   absl::StatusCode::kDataLoss);
}

// The entries of the directory `root`, read in full before any is acted on;
// empty when `root` does not exist.
absl::StatusOr<std::vector<fs::path>> DirectoryEntries(const std::string& root) {
  std::vector<fs::path> paths;
  std::error_code error;
  fs::directory_iterator it(root, error);
  if (error == std::errc::no_such_file_or_directory) return paths;
  for (; !error && it != fs::directory_iterator(); it.increment(error)) paths.push_back(it->path());
  if (error) {
    return UserError(absl::StrCat("cannot list checkpoint.dir ", root, ": ", error.message()),
                     "point checkpoint.dir at a directory, or at a path where one can be created");
  }
  return paths;
}

}  // namespace

std::optional<int64_t> StepOfDirName(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  int64_t step;
  if (!std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(digits, &step)) {
    return std::nullopt;
  }
  return step;
}

std::string StepDirName(int64_t step) { return absl::StrFormat("%s%08d", kStepPrefix, step); }

std::string StepDir(const std::string& root, int64_t step) {
  return (fs::path(root) / StepDirName(step)).string();
}

std::string TemporaryStepDir(const std::string& root, int64_t step) {
  return StepDir(root, step) + kTemporarySuffix;
}

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root) {
  ASSIGN_OR_RETURN(const std::vector<fs::path> paths, DirectoryEntries(root));
  std::vector<CheckpointEntry> entries;
  for (const fs::path& path : paths) {
    const std::optional<int64_t> step = StepOfDirName(path.filename().string());
    if (!step) continue;
    // The names step_N are tetra's: anything else under one is damage, never
    // skipped in silence (a resume would quietly start from an older step).
    std::error_code error;
    const bool directory = fs::is_directory(path, error);
    const bool complete = directory && fs::exists(path / kCompleteMarkerName, error);
    if (error || !directory) {
      return UserError(
          absl::StrCat("checkpoint ", path.string(), " is not a readable directory",
                       error ? absl::StrCat(": ", error.message()) : ""),
          "remove or repair it: checkpoint.dir holds the step_NNNNNNNN directories tetra writes");
    }
    entries.push_back({*step, path.string(), complete});
  }
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return entries;
}

absl::StatusOr<std::optional<CheckpointEntry>> NewestCompleteCheckpoint(const std::string& root,
                                                                        std::ostream& notes) {
  ASSIGN_OR_RETURN(const std::vector<CheckpointEntry> entries, ListCheckpoints(root));
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->complete) return *it;
    notes << "tetra: checkpoint " << it->path << " is incomplete (no " << kCompleteMarkerName
          << " marker: its save was interrupted); falling back to an older one\n";
  }
  return std::nullopt;
}

absl::Status WriteFileDurably(const std::string& path, const void* data, size_t size) {
  return WriteFileAtomically(path, std::string_view(static_cast<const char*>(data), size),
                             kWritableHint);
}

absl::StatusOr<std::string> CreateTemporaryStepDir(const std::string& root, int64_t step) {
  const fs::path tmp = TemporaryStepDir(root, step);
  std::error_code error;
  fs::remove_all(tmp, error);
  if (!error) fs::create_directories(tmp, error);
  if (error)
    return FilesystemError(absl::StrCat("creating checkpoint directory ", tmp.string()), error);
  return tmp.string();
}

absl::StatusOr<std::string> CommitStepDir(const std::string& tmp_dir, const std::string& root,
                                          int64_t step) {
  RETURN_IF_ERROR(SyncDirectory(tmp_dir, kWritableHint));
  const fs::path final_dir = StepDir(root, step);
  std::error_code error;
  // A directory of the same step (an earlier run that went on past it) is
  // replaced: the new one is the state this run continues from.
  fs::remove_all(final_dir, error);
  if (!error) fs::rename(tmp_dir, final_dir, error);
  if (error) {
    return FilesystemError(absl::StrCat("renaming ", tmp_dir, " to ", final_dir.string()), error);
  }
  RETURN_IF_ERROR(SyncDirectory(root, kWritableHint));
  return final_dir.string();
}

absl::Status RemoveOldCheckpoints(const std::string& root, int keep) {
  std::error_code error;
  ASSIGN_OR_RETURN(const std::vector<fs::path> paths, DirectoryEntries(root));
  for (const fs::path& path : paths) {
    const std::string name = path.filename().string();
    if (name.rfind(kStepPrefix, 0) == 0 && name.ends_with(kTemporarySuffix)) {
      fs::remove_all(path, error);
      if (error) return FilesystemError(absl::StrCat("removing ", path.string()), error);
    }
  }
  if (keep <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries, ListCheckpoints(root));
  std::vector<CheckpointEntry> complete;
  for (CheckpointEntry& entry : entries) {
    if (entry.complete) complete.push_back(std::move(entry));
  }
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    fs::remove_all(complete[i].path, error);
    if (error) return FilesystemError(absl::StrCat("removing ", complete[i].path), error);
  }
  return absl::OkStatus();
}

}  // namespace tetra
