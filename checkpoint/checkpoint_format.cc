#include "checkpoint/checkpoint_format.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint_directory.h"
#include "core/crc32c.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

constexpr char kManifestChecksumKey[] = "manifest_crc32c";

// The manifest's bytes against the checksum in `dir`'s COMPLETE marker, when
// there is one (a save that died before it left none: the caller says so).
absl::Status CheckAgainstMarker(const std::string& dir, const std::string& manifest_path,
                                std::string_view manifest_bytes) {
  const std::string marker_path = absl::StrCat(dir, "/", kCompleteMarkerName);
  std::error_code error;
  if (!std::filesystem::exists(marker_path, error) && !error) return absl::OkStatus();
  constexpr int64_t kMarkerLimit = 4096;  // "step N" and the checksum
  ASSIGN_OR_RETURN(const InputFile file,
                   InputFile::Open(marker_path, "completion marker", kDamagedCheckpointHint));
  if (file.size() > kMarkerLimit) {
    return UserError(absl::StrCat("the completion marker ", marker_path, " has ", file.size(),
                                  " bytes, where a marker has a few dozen: it is damaged"),
                     kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  ASSIGN_OR_RETURN(const std::string marker, file.ReadAll());
  uint32_t expected = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(marker, '\n')) {
    if (absl::ConsumePrefix(&line, kManifestChecksumKey) && absl::ConsumePrefix(&line, " ")) {
      found = absl::SimpleHexAtoi(line, &expected);
    }
  }
  if (!found) {
    return UserError(absl::StrCat("the completion marker ", marker_path, " holds no valid ",
                                  kManifestChecksumKey, " line: it is damaged"),
                     kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  const uint32_t actual = Crc32c(manifest_bytes.data(), manifest_bytes.size());
  if (actual != expected) {
    return UserError(
        absl::StrFormat("checkpoint manifest %s is corrupt: its bytes have CRC-32C %08x but "
                        "%s says %08x",
                        manifest_path, actual, marker_path, expected),
        kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

}  // namespace

std::string RankFileName(int rank) { return absl::StrFormat("rank_%05d.bin", rank); }

std::string KindName(TensorRecord::Kind kind) {
  switch (kind) {
    case TensorRecord::WEIGHT:
      return "weight";
    case TensorRecord::EXP_AVG:
      return "exp_avg";
    case TensorRecord::EXP_AVG_SQ:
      return "exp_avg_sq";
    case TensorRecord::BUFFER:
      return "buffer";
  }
  return absl::StrCat("kind ", static_cast<int>(kind));
}

std::vector<DimRange> ShardBox(const Shape& global_shape, const TensorShard& shard) {
  const Shape local = ShardShape(global_shape, shard);
  std::vector<DimRange> box(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    // Clipped to the global extent: a padded slice's padding rows hold nothing.
    const int64_t begin =
        std::min(static_cast<int>(d) == shard.dim ? shard.index * local[d] : 0, global_shape[d]);
    box[d].set_begin(begin);
    box[d].set_end(std::min(begin + local[d], global_shape[d]));
  }
  return box;
}

int64_t BoxNumElements(const std::vector<DimRange>& box) {
  Shape extents;
  for (const DimRange& r : box) extents.push_back(r.end() - r.begin());
  return NumElements(extents);
}

std::string BoxString(const std::vector<DimRange>& box) {
  return absl::StrCat("[",
                      absl::StrJoin(box, ", ",
                                    [](std::string* out, const DimRange& r) {
                                      absl::StrAppend(out, r.begin(), ":", r.end());
                                    }),
                      "]");
}

uint32_t ShardCrc32c(const TensorRecord& tensor, const ShardRecord& shard, const void* data) {
  // The name goes first with its length, so no two records read the same.
  const std::string place =
      absl::StrCat(tensor.name().size(), ":", tensor.name(), " ", KindName(tensor.kind()), " [",
                   absl::StrJoin(tensor.shape(), ", "), "] ",
                   BoxString(std::vector<DimRange>(shard.box().begin(), shard.box().end())), " ",
                   shard.flat_begin(), ":", shard.flat_end(), "\n");
  return Crc32c(data, shard.bytes(), Crc32c(place.data(), place.size()));
}

std::string CompleteMarkerText(int64_t step, std::string_view manifest_bytes) {
  return absl::StrFormat("step %d\n%s %08x\n", step, kManifestChecksumKey,
                         Crc32c(manifest_bytes.data(), manifest_bytes.size()));
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kManifestFileName);
  ASSIGN_OR_RETURN(const std::string bytes,
                   ReadInputFile(path, "checkpoint manifest",
                                 "point at a checkpoint directory (step_NNNNNNNN) written by "
                                 "tetra, or the checkpoint.dir that holds them"));
  CheckpointManifest manifest;
  if (!manifest.ParseFromString(bytes)) {
    return UserError(absl::StrCat("checkpoint manifest ", path, " (", bytes.size(),
                                  " bytes) is corrupt: it does not parse"),
                     kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
  }
  if (manifest.format_version() != kCheckpointFormatVersion) {
    return UserError(absl::StrCat("checkpoint manifest ", path, " has format version ",
                                  manifest.format_version(), ", this tetra reads version ",
                                  kCheckpointFormatVersion),
                     "load it with the tetra version that wrote it");
  }
  RETURN_IF_ERROR(CheckAgainstMarker(dir, path, bytes));
  return manifest;
}

}  // namespace tetra
