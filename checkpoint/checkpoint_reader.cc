#include "checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/checkpoint_format.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

std::string TensorLabel(const TensorRecord& tensor) {
  return absl::StrCat(UserText(tensor.name()), " (", KindName(tensor.kind()), ")");
}

Shape ShapeOf(const TensorRecord& tensor) {
  return Shape(tensor.shape().begin(), tensor.shape().end());
}

std::vector<DimRange> BoxOf(const ShardRecord& shard) {
  return std::vector<DimRange>(shard.box().begin(), shard.box().end());
}

std::vector<DimRange> GlobalBox(const TensorRecord& tensor) {
  std::vector<DimRange> box(tensor.shape_size());
  for (int d = 0; d < tensor.shape_size(); ++d) box[d].set_end(tensor.shape(d));
  return box;
}

// The number of elements of `tensor`'s global shape; a shape no tensor can
// have (a negative dim, more F32 bytes than int64 counts, more dims than any
// model tensor) means the manifest is damaged.
absl::StatusOr<int64_t> TensorElements(const std::string& manifest_path,
                                       const TensorRecord& tensor) {
  constexpr int kMaxDims = 8;
  int64_t n = 1;
  bool ok = tensor.shape_size() <= kMaxDims;
  for (int d = 0; ok && d < tensor.shape_size(); ++d) {
    ok = tensor.shape(d) >= 0 && !__builtin_mul_overflow(n, tensor.shape(d), &n) &&
         n <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(float));
  }
  if (ok) return n;
  return UserError(
      absl::StrCat(
          "checkpoint manifest ", manifest_path, " gives ", TensorLabel(tensor), " the shape ",
          tensor.shape_size() <= kMaxDims ? ShapeString(ShapeOf(tensor))
                                          : absl::StrCat("of ", tensor.shape_size(), " dims"),
          ", which no tensor has (a negative dim, or more elements than can be counted)"),
      kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
}

// A shard record that cannot describe real data: the manifest is damaged.
// The tensor's shape is checked (TensorElements), so box sizes and byte
// counts within it do not overflow.
absl::Status CheckShardRecord(const std::string& manifest_path, const TensorRecord& tensor,
                              const ShardRecord& shard) {
  // The file is a plain name inside the checkpoint directory, as RankFileName
  // makes: printable, no '/', at most NAME_MAX bytes (it appears in messages).
  constexpr size_t kMaxFileNameBytes = 255;
  const std::string& file = shard.file();
  bool ok =
      shard.box_size() == tensor.shape_size() && !file.empty() &&
      file.size() <= kMaxFileNameBytes &&
      std::all_of(file.begin(), file.end(), [](char c) { return c > ' ' && c < 0x7f && c != '/'; });
  for (int d = 0; ok && d < shard.box_size(); ++d) {
    ok = 0 <= shard.box(d).begin() && shard.box(d).begin() <= shard.box(d).end() &&
         shard.box(d).end() <= tensor.shape(d);
  }
  uint64_t bytes = 0;
  ok = ok && 0 <= shard.flat_begin() && shard.flat_begin() <= shard.flat_end() &&
       shard.flat_end() <= BoxNumElements(BoxOf(shard)) &&
       !__builtin_mul_overflow(static_cast<uint64_t>(shard.flat_end() - shard.flat_begin()),
                               sizeof(float), &bytes) &&
       shard.bytes() == bytes &&
       shard.offset() <= std::numeric_limits<uint64_t>::max() - shard.bytes();
  if (ok) return absl::OkStatus();
  return UserError(
      absl::StrCat("checkpoint manifest ", manifest_path, " is inconsistent: a shard of ",
                   TensorLabel(tensor), " in file ", UserText(shard.file()), " holds elements [",
                   shard.flat_begin(), ", ", shard.flat_end(), ") of box ", BoxString(BoxOf(shard)),
                   " in ", shard.bytes(), " bytes, which does not fit the tensor's shape ",
                   ShapeString(ShapeOf(tensor))),
      kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
}

// The shape of `box`'s elements.
Shape BoxShape(const std::vector<DimRange>& box) {
  Shape shape(box.size());
  for (size_t d = 0; d < box.size(); ++d) shape[d] = box[d].end() - box[d].begin();
  return shape;
}

// Whether `shard` holds elements, and its box meets `box` in every dim.
bool Overlaps(const ShardRecord& shard, const std::vector<DimRange>& box) {
  bool overlap = shard.flat_begin() < shard.flat_end();
  for (int d = 0; d < static_cast<int>(box.size()); ++d) {
    overlap = overlap && shard.box(d).begin() < box[d].end() && box[d].begin() < shard.box(d).end();
  }
  return overlap;
}

// A box of a tensor, filled shard by shard: it counts the elements covered,
// so that what the shards leave uncovered is found.
class BoxFiller {
 public:
  explicit BoxFiller(const std::vector<DimRange>& box)
      : box_(box), shape_(BoxShape(box)), out_(Tensor::Empty(shape_)), covered_(out_.numel(), 0) {}

  // Copies the elements of `shard` (its data: `values`) that lie in the box.
  void Copy(const ShardRecord& shard, const float* values);

  int64_t num_covered() const { return num_covered_; }
  bool complete() const { return num_covered_ == out_.numel(); }
  const Tensor& out() const { return out_; }

 private:
  // Copies `count` values to the box's elements from `at` on (row-major).
  void Fill(int64_t at, const float* values, int64_t count);

  const std::vector<DimRange>& box_;
  const Shape shape_;
  Tensor out_;
  std::vector<char> covered_;
  int64_t num_covered_ = 0;
};

void BoxFiller::Copy(const ShardRecord& shard, const float* values) {
  const int dims = static_cast<int>(box_.size());
  // Copies go by runs along the last dim (a 0-dim tensor is one run of one).
  const int last = dims - 1;
  const int64_t box_begin = dims ? box_[last].begin() : 0, box_end = dims ? box_[last].end() : 1;
  const int64_t out_row = box_end - box_begin;
  const int64_t shard_row_end = dims ? shard.box(last).end() : 1;
  std::vector<int64_t> coord(dims);
  for (int64_t i = shard.flat_begin(); i < shard.flat_end();) {
    // Element i of the shard's box (row-major) -> its global coordinates;
    // the run goes on to the end of its row in the shard or of the shard.
    int64_t rest = i;
    for (int d = last; d >= 0; --d) {
      const int64_t extent = shard.box(d).end() - shard.box(d).begin();
      coord[d] = shard.box(d).begin() + rest % extent;
      rest /= extent;
    }
    const int64_t column = dims ? coord[last] : 0;
    const int64_t run = std::min(shard.flat_end() - i, shard_row_end - column);
    // Inside `box`: the row's leading coordinates, then the overlap of the columns.
    bool inside = true;
    int64_t row = 0;
    for (int d = 0; d < last && inside; ++d) {
      inside = box_[d].begin() <= coord[d] && coord[d] < box_[d].end();
      row = row * shape_[d] + coord[d] - box_[d].begin();
    }
    const int64_t lo = std::max(column, box_begin), hi = std::min(column + run, box_end);
    if (inside && lo < hi) {
      Fill(row * out_row + lo - box_begin, values + (i - shard.flat_begin()) + (lo - column),
           hi - lo);
    }
    i += run;
  }
}

void BoxFiller::Fill(int64_t at, const float* values, int64_t count) {
  std::memcpy(out_.f32() + at, values, count * sizeof(float));
  for (int64_t k = at; k < at + count; ++k) {
    num_covered_ += !covered_[k];
    covered_[k] = 1;
  }
}

}  // namespace

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir) {
  CheckpointReader reader;
  reader.dir_ = dir;
  ASSIGN_OR_RETURN(reader.manifest_, ReadManifest(dir));
  const std::string manifest_path = absl::StrCat(dir, "/", kManifestFileName);
  for (int i = 0; i < reader.manifest_.tensors_size(); ++i) {
    const TensorRecord& tensor = reader.manifest_.tensors(i);
    if (tensor.dtype() != "F32") {
      return UserError(absl::StrCat("checkpoint ", dir, " stores ", TensorLabel(tensor), " as ",
                                    UserText(tensor.dtype()), "; this tetra reads F32 checkpoints"),
                       "load it with the tetra version that wrote it");
    }
    ASSIGN_OR_RETURN(const int64_t elements, TensorElements(manifest_path, tensor));
    // The shards' elements, counted up to the tensor's: what they can cover.
    int64_t held = 0;
    for (const ShardRecord& shard : tensor.shards()) {
      RETURN_IF_ERROR(CheckShardRecord(manifest_path, tensor, shard));
      held = std::min(elements, held + (shard.flat_end() - shard.flat_begin()));
    }
    if (held < elements) return reader.MissingElementsError(tensor, held, GlobalBox(tensor));
    if (!reader.index_.try_emplace({tensor.name(), tensor.kind()}, i).second) {
      return UserError(absl::StrCat("checkpoint manifest ", manifest_path, " lists ",
                                    TensorLabel(tensor), " twice"),
                       kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
    }
  }
  return reader;
}

absl::Status CheckpointReader::MissingElementsError(const TensorRecord& tensor, int64_t held,
                                                    const std::vector<DimRange>& box) const {
  return UserError(absl::StrCat("checkpoint ", dir_, " holds only ", held, " of the ",
                                BoxNumElements(box), " elements of ", TensorLabel(tensor), " in ",
                                BoxString(box), ": shards are missing from the manifest"),
                   kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
}

const TensorRecord* CheckpointReader::Find(std::string_view name, TensorRecord::Kind kind) const {
  auto it = index_.find(std::pair<std::string, int>(std::string(name), kind));
  return it == index_.end() ? nullptr : &manifest_.tensors(it->second);
}

absl::StatusOr<InputFile> CheckpointReader::OpenShard(const TensorRecord& tensor,
                                                      const ShardRecord& shard) const {
  const std::string path = absl::StrCat(dir_, "/", shard.file());
  ASSIGN_OR_RETURN(InputFile file,
                   InputFile::Open(path, "checkpoint file", kDamagedCheckpointHint));
  const auto size = static_cast<uint64_t>(file.size());
  if (shard.bytes() > size || shard.offset() > size - shard.bytes()) {
    return UserError(absl::StrCat("checkpoint file ", path, " is truncated: ", TensorLabel(tensor),
                                  " needs ", shard.bytes(), " bytes at offset ", shard.offset(),
                                  " but the file has ", size),
                     kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  return file;
}

absl::StatusOr<std::string> CheckpointReader::ReadShard(const TensorRecord& tensor,
                                                        const ShardRecord& shard) const {
  ASSIGN_OR_RETURN(const InputFile file, OpenShard(tensor, shard));
  ASSIGN_OR_RETURN(std::string bytes, file.Read(static_cast<int64_t>(shard.offset()),
                                                static_cast<int64_t>(shard.bytes())));
  const uint32_t crc = ShardCrc32c(tensor, shard, bytes.data());
  if (crc != shard.crc32c()) {
    return UserError(
        absl::StrCat("checkpoint file ", file.path(), " is corrupt: ", TensorLabel(tensor),
                     " at bytes [", shard.offset(), ", ", shard.offset() + shard.bytes(),
                     ") has CRC-32C ", crc, " but the manifest says ", shard.crc32c(),
                     " (its data, or the record naming it, was altered)"),
        kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  return bytes;
}

absl::StatusOr<Tensor> CheckpointReader::ReadBox(const TensorRecord& tensor,
                                                 const std::vector<DimRange>& box) const {
  const int dims = static_cast<int>(box.size());
  TETRA_CHECK(dims == tensor.shape_size()) << "a " << dims << "-dim box of " << TensorLabel(tensor);
  // Before anything of the box's size is allocated: the shards that overlap
  // it are in their files, and hold enough elements to cover it.
  const int64_t wanted = NumElements(BoxShape(box));
  int64_t held = 0;
  for (const ShardRecord& shard : tensor.shards()) {
    if (!Overlaps(shard, box)) continue;
    RETURN_IF_ERROR(OpenShard(tensor, shard).status());
    held = std::min(wanted, held + (shard.flat_end() - shard.flat_begin()));
  }
  if (held < wanted) return MissingElementsError(tensor, held, box);
  BoxFiller filler(box);
  for (const ShardRecord& shard : tensor.shards()) {
    if (!Overlaps(shard, box)) continue;
    ASSIGN_OR_RETURN(std::string bytes, ReadShard(tensor, shard));
    filler.Copy(shard, reinterpret_cast<const float*>(bytes.data()));
  }
  if (!filler.complete()) return MissingElementsError(tensor, filler.num_covered(), box);
  return filler.out();
}

absl::StatusOr<Tensor> CheckpointReader::ReadGlobal(const TensorRecord& tensor) const {
  return ReadBox(tensor, GlobalBox(tensor));
}

}  // namespace tetra
