// InputFile: how tetra opens every file it reads (configs, token files,
// weights, checkpoint manifests and shards), so each gets the same checks.
// The path must name a regular file; the null device counts as an empty one
// (`--config /dev/null` means "all defaults"). A FIFO, directory, socket or
// device is refused with an error naming the path and what it is, and the
// check never blocks: the file is opened with O_NONBLOCK, then fstat'ed
// (a plain open of a FIFO that has no writer waits forever, and reading a
// directory or /dev/zero gives nothing or never ends).
#ifndef TETRA_CORE_INPUT_FILE_H_
#define TETRA_CORE_INPUT_FILE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tetra {

class InputFile {
 public:
  // `what` names the file in messages ("config file", "safetensors file");
  // `hint` says how to fix the path (it names the flag or config field the
  // path came from). A missing file is kNotFound.
  static absl::StatusOr<InputFile> Open(const std::string& path, const std::string& what,
                                        const std::string& hint);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }
  int fd() const { return fd_; }
  // Bytes when opened (0 for the null device).
  int64_t size() const { return size_; }

  // Bytes [offset, offset + count), which must lie inside size() (checked).
  absl::StatusOr<std::string> Read(int64_t offset, int64_t count) const;
  // Read(0, size()).
  absl::StatusOr<std::string> ReadAll() const { return Read(0, size_); }
  // The size now, for noticing a file that shrank after Open.
  absl::StatusOr<int64_t> CurrentSize() const;

 private:
  InputFile(std::string path, std::string what, int fd, int64_t size)
      : path_(std::move(path)), what_(std::move(what)), fd_(fd), size_(size) {}

  std::string path_;
  std::string what_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// InputFile::Open, then ReadAll: the whole content of a small file.
absl::StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                          const std::string& hint);

}  // namespace tetra

#endif  // TETRA_CORE_INPUT_FILE_H_
