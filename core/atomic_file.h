// Files written whole or not at all: the bytes go to `path`.tmp, which is
// fsynced, renamed over `path`, and the directory fsynced, so a crash, a
// full disk or a failed write never leaves half a file under `path` (and an
// earlier file there stays until the new one is complete). Every file tetra
// writes for users goes through here: exported weights and their JSON,
// checkpoint data, traces and reports.
#ifndef TETRA_CORE_ATOMIC_FILE_H_
#define TETRA_CORE_ATOMIC_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tetra {

class AtomicFile {
 public:
  // Opens `path`.tmp for writing. Errors (one sentence with the path and the
  // system's reason) end with `hint`, the caller's advice on the fix. A
  // `path` or `path`.tmp that is not a regular file (a directory, pipe or
  // device) is refused, never replaced.
  static absl::StatusOr<AtomicFile> Create(const std::string& path, const std::string& hint);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();  // without Commit: the temporary file is removed, `path` untouched

  absl::Status Append(const void* data, size_t size);
  absl::Status Append(std::string_view bytes) { return Append(bytes.data(), bytes.size()); }
  // Makes the bytes appended so far the file at `path`, durably.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string hint, int fd);
  absl::Status Error(const std::string& what, int error) const;

  std::string path_, hint_;
  int fd_ = -1;
};

// `bytes` as the whole file at `path` (AtomicFile).
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 const std::string& hint);

// fsyncs the directory `path`, so the names created in it are on disk.
absl::Status SyncDirectory(const std::string& path, const std::string& hint);

}  // namespace tetra

#endif  // TETRA_CORE_ATOMIC_FILE_H_
