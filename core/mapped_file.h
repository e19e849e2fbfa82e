// MappedFile: an input file (core/input_file.h) mapped read-only, for the
// large files tetra reads in pieces (token files, safetensors weights): a
// multi-GB file costs no memory until it is read.
//
// A mapped file can shrink under the mapping (a shard truncated or rewritten
// by another process during training). Touching a page past the new end then
// raises SIGBUS, which kills the process with no message, and bytes past the
// end inside the last page read as zeros. Reads that may happen after such a
// change go through ReadRange, which turns both into an error naming the
// file: the read runs with SIGBUS caught for this thread (a fault jumps out
// of it with siglongjmp), and afterwards the file must still hold the range.
#ifndef TETRA_CORE_MAPPED_FILE_H_
#define TETRA_CORE_MAPPED_FILE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/input_file.h"

namespace tetra {

class MappedFile {
 public:
  // InputFile::Open (same `what` and `hint`), then maps the whole file.
  static absl::StatusOr<MappedFile> Open(const std::string& path, const std::string& what,
                                         const std::string& hint);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return file_.path(); }
  // The mapping, size() bytes. Direct reads are for headers parsed right after
  // Open; later reads go through ReadRange.
  const uint8_t* data() const { return data_; }
  int64_t size() const { return file_.size(); }

  // Runs `read(data() + offset)`, which touches bytes [offset, offset + size)
  // only, 0 <= offset <= offset + size <= size() (checked), and then checks
  // that the file still holds them. `read` must own nothing that needs a
  // destructor: on a fault it is abandoned midway.
  absl::Status ReadRange(int64_t offset, int64_t size,
                         absl::FunctionRef<void(const uint8_t*)> read) const;

 private:
  MappedFile(InputFile file, const uint8_t* data) : file_(std::move(file)), data_(data) {}
  void Unmap();

  InputFile file_;  // kept open to fstat it after each read
  const uint8_t* data_ = nullptr;
};

}  // namespace tetra

#endif  // TETRA_CORE_MAPPED_FILE_H_
