#include "train/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/weights_io.h"
#include "core/file_type.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "parallel/parallel_state.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

std::string WritableHint(const std::string& field) {
  return absl::StrCat("point ", field,
                      " at a place this job can write (it is checked before the first step, so "
                      "no run ends with its output lost)");
}

absl::Status NotWritable(const std::string& field, const std::string& path,
                         const std::string& cause) {
  return UserError(absl::StrCat(field, " ", UserPath(path), " cannot be written: ", cause),
                   WritableHint(field));
}

// Creates `dir`, the directory of `path` (the value of `field`).
absl::Status CreateDirectory(const std::string& field, const std::string& path,
                             const std::string& dir) {
  std::error_code error;
  if (!dir.empty()) fs::create_directories(dir, error);
  if (error)
    return NotWritable(field, path,
                       absl::StrCat("creating directory ", UserPath(dir), ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWritableDirectory(const std::string& field, const std::string& dir) {
  RETURN_IF_ERROR(CreateDirectory(field, dir, dir));
  // Named by host and pid: ranks probing one shared directory never collide.
  const std::string probe = absl::StrCat(dir, "/.tetra_write_probe.", HostName(), ".", getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return NotWritable(field, dir, absl::StrCat("creating a file in it: ", std::strerror(errno)));
  const bool written = ::write(fd, "x", 1) == 1;
  const int write_error = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!written)
    return NotWritable(field, dir,
                       absl::StrCat("writing a file in it: ", std::strerror(write_error)));
  return absl::OkStatus();
}

absl::Status CheckWritableFile(const std::string& field, const std::string& path) {
  RETURN_IF_ERROR(CreateDirectory(field, path, fs::path(path).parent_path().string()));
  // A pipe would block the open below, a device would be replaced by the write.
  RETURN_IF_ERROR(CheckOutputPath(path, field, WritableHint(field)));
  // O_EXCL: a file this check created is removed, one that was there is kept.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  const bool created = fd >= 0;
  // O_NONBLOCK: a FIFO put there since the check fails here instead of waiting for a reader.
  if (!created && errno == EEXIST) {
    fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
  }
  if (fd < 0) return NotWritable(field, path, std::strerror(errno));
  ::close(fd);
  if (created) ::unlink(path.c_str());
  return absl::OkStatus();
}

absl::Status CheckOutputsWritable(const TrainerConfig& config, Communicator& world) {
  const LogConfig& log = config.log();
  std::vector<std::pair<const char*, const std::string*>> directories, files;
  if (world.rank() == 0) {
    directories = {{"export_path", &config.export_path()},
                   {"log.tensorboard_dir", &log.tensorboard_dir()}};
    files = {{"log.metrics_path", &log.metrics_path()}, {"log.trace_path", &log.trace_path()}};
  }
  directories.emplace_back("checkpoint.dir", &config.checkpoint().dir());
  directories.emplace_back("checkpoint.local_dir", &config.checkpoint().local_dir());
  absl::Status status;
  for (const auto& [field, dir] : directories) {
    if (status.ok() && !dir->empty()) status = CheckWritableDirectory(field, *dir);
  }
  for (const auto& [field, path] : files) {
    if (status.ok() && !path->empty()) status = CheckWritableFile(field, *path);
  }
  // The export's own files too: a pipe among them would be found after the last step.
  if (status.ok() && world.rank() == 0 && !config.export_path().empty()) {
    status =
        CheckExportFiles(config.export_path(), "export_path's file", WritableHint("export_path"));
  }
  return AgreeOnStatus(world, std::move(status));
}

}  // namespace tetra
