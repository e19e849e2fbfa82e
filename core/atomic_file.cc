#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/file_type.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

std::string TemporaryPath(const std::string& path) { return path + ".tmp"; }

absl::Status SystemError(const std::string& what, int error, const std::string& hint) {
  const absl::Status status = absl::ErrnoToStatus(error, what);
  return UserError(std::string(status.message()), hint, absl::StatusCode::kDataLoss);
}

}  // namespace

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path, const std::string& hint) {
  const std::string tmp = TemporaryPath(path);
  // The rename in Commit would replace whatever `path` names.
  RETURN_IF_ERROR(CheckOutputPath(path, "output", hint));
  RETURN_IF_ERROR(CheckOutputPath(tmp, "temporary file", hint));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError(absl::StrCat("cannot create ", tmp), errno, hint);
  return AtomicFile(path, hint, fd);
}

AtomicFile::AtomicFile(std::string path, std::string hint, int fd)
    : path_(std::move(path)), hint_(std::move(hint)), fd_(fd) {}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      hint_(std::move(other.hint_)),
      fd_(std::exchange(other.fd_, -1)) {}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(TemporaryPath(path_).c_str());
}

absl::Status AtomicFile::Error(const std::string& what, int error) const {
  return SystemError(absl::StrCat(what, " ", TemporaryPath(path_)), error, hint_);
}

absl::Status AtomicFile::Append(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return Error("cannot write", written < 0 ? errno : ENOSPC);
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  // Data on disk before the rename makes it visible under `path`.
  if (::fsync(fd_) != 0) return Error("cannot fsync", errno);
  const int fd = std::exchange(fd_, -1);
  const std::string tmp = TemporaryPath(path_);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return SystemError(absl::StrCat("cannot close ", tmp), error, hint_);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return SystemError(absl::StrCat("cannot rename ", tmp, " to ", path_), error, hint_);
  }
  const std::filesystem::path directory = std::filesystem::path(path_).parent_path();
  return SyncDirectory(directory.empty() ? "." : directory.string(), hint_);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 const std::string& hint) {
  ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path, hint));
  RETURN_IF_ERROR(file.Append(bytes));
  return file.Commit();
}

absl::Status SyncDirectory(const std::string& path, const std::string& hint) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SystemError(absl::StrCat("cannot open directory ", path), errno, hint);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) return SystemError(absl::StrCat("cannot fsync directory ", path), error, hint);
  return absl::OkStatus();
}

}  // namespace tetra
