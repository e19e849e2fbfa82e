// Safetensors: Hugging Face's weight file format, the way tetra imports and
// exports weights (docs/architecture.md "Weights").
//
// Layout: an 8-byte little-endian uint64 header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"key": "value"}}
// then the data buffer; offsets are bytes relative to the buffer's start.
//
// SafetensorsFile maps a file read-only and converts tensors to fp32; a tensor
// of a dtype tetra does not read (I64, U8, F64, ...) is still listed, so a
// caller can report it, and only reading it is an error. Like Hugging Face's
// reader (the safetensors crate's `validate`), it accepts a file only when
// its tensors, in offset order, tile the data buffer exactly: no overlaps, no
// two names for the same bytes, no holes and nothing after the last tensor.
// WriteSafetensors writes fp32 data as F32 or BF16 through a temporary file
// and a rename, so the final name never holds a half-written file.
#ifndef TETRA_CHECKPOINT_SAFETENSORS_H_
#define TETRA_CHECKPOINT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace tetra {

struct SafetensorsEntry {
  std::string name;
  // nullopt: a dtype of the format that tetra does not read (dtype_name says
  // which); ReadF32 refuses such a tensor.
  std::optional<DType> dtype;
  std::string dtype_name;  // as the header spells it: "F32", "I64", ...
  Shape shape;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header: dtypes (any the format
  // defines), shapes, that every tensor's byte range lies inside the data
  // buffer with the size its shape and dtype need, and that the ranges tile
  // the buffer.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return mapping_.path(); }
  // In header order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr when absent.
  const SafetensorsEntry* Find(std::string_view name) const;
  // Converts an F32, BF16 or F16 tensor to fp32 into `out` (numel floats); an
  // error naming the dtype for any other, or when the file shrank since Open.
  absl::Status ReadF32(std::string_view name, float* out) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  explicit SafetensorsFile(MappedFile mapping) : mapping_(std::move(mapping)) {}

  MappedFile mapping_;
  int64_t data_offset_ = 0;  // where the data buffer starts in the file
  std::vector<SafetensorsEntry> entries_;
  std::vector<uint64_t> begin_offsets_;               // entries_[i]'s first byte in the buffer
  std::map<std::string, size_t, std::less<>> index_;  // name -> entries_ index
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensorRef {
  std::string name;
  Shape shape;
  const float* data;  // NumElements(shape) floats
};

// Writes `tensors` in the given order as `dtype` (kF32, or kBF16 rounded to
// nearest even as FloatToBf16), the header padded with spaces to a multiple of
// 8 bytes. Writes `path + ".tmp"`, syncs it, then renames it to `path`.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensorRef>& tensors, DType dtype,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_SAFETENSORS_H_
