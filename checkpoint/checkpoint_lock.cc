#include "checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "parallel/parallel_state.h"

namespace tetra {
namespace {

constexpr char kWritableHint[] =
    "point checkpoint.dir at a directory this job can create and write";

// "host node7\npid 4242\nstarted 2026-12-01 21:33:05 UTC\n"
std::string HolderText() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char started[32] = {};
  std::strftime(started, sizeof(started), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return absl::StrCat("host ", HostName(), "\npid ", getpid(), "\nstarted ", started, "\n");
}

// The holder a lock file's text names, as a phrase: "pid 4242 on host
// "node7", started 2026-12-01 21:33:05 UTC". The text is whatever the file
// holds, so it is read in bounded size and quoted.
std::string DescribeHolder(int fd) {
  char buffer[1024];
  const ssize_t size = ::pread(fd, buffer, sizeof(buffer), 0);
  if (size <= 0) return "";
  std::string host, pid, started;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(buffer, static_cast<size_t>(size)), '\n')) {
    if (absl::ConsumePrefix(&line, "host ")) host = std::string(line);
    if (absl::ConsumePrefix(&line, "pid ")) pid = std::string(line);
    if (absl::ConsumePrefix(&line, "started ")) started = std::string(line);
  }
  if (host.empty() && pid.empty())
    return absl::StrCat("a holder its text does not name: ",
                        UserText(std::string_view(buffer, static_cast<size_t>(size))));
  return absl::StrCat("pid ", UserText(pid), " on host ", UserText(host), ", started ",
                      UserText(started));
}

bool SameFile(int fd, const std::string& path) {
  struct stat held, named;
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// Why `fd`, the lock file `path` of checkpoint.dir `dir`, could not be
// locked (flock's `flock_error`): another job holds it, or the file system
// cannot lock. Closes `fd`.
absl::Status LockFailure(const std::string& dir, const std::string& path, int fd, int flock_error) {
  const std::string holder = DescribeHolder(fd);
  ::close(fd);
  if (flock_error == EWOULDBLOCK) {
    return UserError(
        absl::StrCat(
            "checkpoint.dir ", dir, " is in use by another tetra job (",
            holder.empty() ? "one that has not yet written its details" : holder, ", holding ",
            path, "): two jobs saving there would resume from and remove each other's checkpoints"),
        "wait for that job to end or stop it, or point checkpoint.dir at another directory",
        absl::StatusCode::kFailedPrecondition);
  }
  return UserError(
      absl::StrCat("cannot lock ", path, ": ", std::strerror(flock_error)),
      "put checkpoint.dir on a file system with flock support (Lustre: mount with -o flock)");
}

// Writes this process's details into the lock file `path` it holds (`fd`,
// closed on failure), noting a previous holder's that are still there.
absl::Status WriteHolder(const std::string& path, int fd, std::ostream& notes) {
  // The previous holder's text is still there: it ended without releasing
  // (killed), and its flock went with it.
  if (const std::string stale = DescribeHolder(fd); !stale.empty()) {
    notes << "tetra: taking over the lock " << path << " of " << stale
          << ", which ended without releasing it\n";
  }
  const std::string text = HolderText();
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const std::string cause = std::strerror(errno);
    ::close(fd);
    return UserError(absl::StrCat("cannot write the lock file ", path, ": ", cause), kWritableHint);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointLock> CheckpointLock::Acquire(const std::string& dir,
                                                       std::ostream& notes) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return UserError(absl::StrCat("cannot create checkpoint.dir ", dir, ": ", error.message()),
                     kWritableHint);
  }
  const std::string path = absl::StrCat(dir, "/", kLockFileName);
  // A holder that releases removes the file: the name may then point to a
  // newer file than the one this process opened and locked, so lock again
  // until the locked file is the one the name points to.
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return UserError(
          absl::StrCat("cannot create the lock file ", path, ": ", std::strerror(errno)),
          kWritableHint);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return LockFailure(dir, path, fd, errno);
    if (!SameFile(fd, path)) {
      ::close(fd);
      continue;
    }
    RETURN_IF_ERROR(WriteHolder(path, fd, notes));
    return CheckpointLock(path, fd);
  }
  return UserError(absl::StrCat("cannot lock ", path, ": other processes keep replacing it"),
                   "run one job per checkpoint.dir");
}

CheckpointLock::CheckpointLock(CheckpointLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

CheckpointLock& CheckpointLock::operator=(CheckpointLock&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CheckpointLock::~CheckpointLock() { Release(); }

void CheckpointLock::Release() {
  if (fd_ < 0) return;
  // Removed while still locked: a process that opened the file before and
  // locks it after finds the name gone or pointing elsewhere, and tries again
  // (Acquire).
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<std::optional<CheckpointLock>> LockCheckpointDir(const std::string& dir,
                                                                Communicator& world,
                                                                std::ostream& notes) {
  if (dir.empty()) return std::nullopt;
  std::optional<CheckpointLock> lock;
  absl::Status status;
  if (world.rank() == 0) {
    absl::StatusOr<CheckpointLock> taken = CheckpointLock::Acquire(dir, notes);
    if (taken.ok()) {
      lock.emplace(*std::move(taken));
    } else {
      status = taken.status();
    }
  }
  RETURN_IF_ERROR(AgreeOnStatus(world, std::move(status)));
  return lock;
}

}  // namespace tetra
