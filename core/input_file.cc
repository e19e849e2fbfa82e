#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/file_type.h"
#include "core/logging.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// Linux's /dev/null (Documentation/admin-guide/devices.txt: char 1, 3).
bool IsNullDevice(const struct stat& info) {
  return S_ISCHR(info.st_mode) && major(info.st_rdev) == 1 && minor(info.st_rdev) == 3;
}

absl::Status ErrnoError(int error, const std::string& what, const std::string& hint) {
  return UserError(absl::StrCat(what, ": ", std::strerror(error)), hint,
                   absl::ErrnoToStatus(error, "").code());
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& path, const std::string& what,
                                          const std::string& hint) {
  const std::string label = absl::StrCat(what, " ", path);
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot read " + label, hint);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, "cannot stat " + label, hint);
  }
  if (!S_ISREG(info.st_mode) && !IsNullDevice(info)) {
    close(fd);
    return UserError(
        absl::StrCat(label, " is ", FileTypeName(info.st_mode), ", not a regular file"),
        absl::StrCat(hint,
                     " (tetra reads files whole, and never from pipes, "
                     "directories or devices)"));
  }
  // Regular files ignore O_NONBLOCK; clearing it keeps reads plain.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return InputFile(path, what, fd, S_ISREG(info.st_mode) ? info.st_size : 0);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::string> InputFile::Read(int64_t offset, int64_t count) const {
  TETRA_CHECK(0 <= offset && 0 <= count && count <= size_ - offset)
      << "bytes [" << offset << ", +" << count << ") of " << path_ << " (" << size_ << " bytes)";
  std::string bytes(static_cast<size_t>(count), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd_, bytes.data() + done, bytes.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ErrnoError(errno, absl::StrCat("reading ", what_, " ", path_, " failed"),
                        "check that the file is readable and the disk healthy");
    }
    if (n == 0) {
      return UserError(absl::StrCat(what_, " ", path_, " shrank from ", size_, " to ",
                                    offset + done, " bytes while tetra was reading it"),
                       "never modify a file while a run reads it", absl::StatusCode::kDataLoss);
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

absl::StatusOr<int64_t> InputFile::CurrentSize() const {
  struct stat info;
  if (fstat(fd_, &info) != 0) {
    return ErrnoError(errno, absl::StrCat("cannot stat ", what_, " ", path_),
                      "check that the file is still there");
  }
  return S_ISREG(info.st_mode) ? int64_t{info.st_size} : 0;
}

absl::StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                          const std::string& hint) {
  absl::StatusOr<InputFile> file = InputFile::Open(path, what, hint);
  if (!file.ok()) return file.status();
  return file->ReadAll();
}

}  // namespace tetra
