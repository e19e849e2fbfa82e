#include "train/checkpoint_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {

std::string RankFileName(int rank) { return absl::StrFormat("rank_%05d.bin", rank); }

std::string KindName(TensorRecord::Kind kind) {
  switch (kind) {
    case TensorRecord::WEIGHT: return "weight";
    case TensorRecord::EXP_AVG: return "exp_avg";
    case TensorRecord::EXP_AVG_SQ: return "exp_avg_sq";
    case TensorRecord::BUFFER: return "buffer";
  }
  return absl::StrCat("kind ", static_cast<int>(kind));
}

std::vector<DimRange> ShardBox(const Shape& global_shape, const TensorShard& shard) {
  const Shape local = ShardShape(global_shape, shard);
  std::vector<DimRange> box(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    const int64_t begin = static_cast<int>(d) == shard.dim ? shard.index * local[d] : 0;
    box[d].set_begin(begin);
    box[d].set_end(begin + local[d]);
  }
  return box;
}

int64_t BoxNumElements(const std::vector<DimRange>& box) {
  Shape extents;
  for (const DimRange& r : box) extents.push_back(r.end() - r.begin());
  return NumElements(extents);
}

std::string BoxString(const std::vector<DimRange>& box) {
  return absl::StrCat("[", absl::StrJoin(box, ", ", [](std::string* out, const DimRange& r) {
                        absl::StrAppend(out, r.begin(), ":", r.end());
                      }), "]");
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
                     "resume from an older checkpoint: move this step directory aside",
                     absl::StatusCode::kDataLoss);
  }
  if (manifest.format_version() != kCheckpointFormatVersion) {
    return UserError(absl::StrCat("checkpoint manifest ", path, " has format version ",
                                  manifest.format_version(), ", this tetra reads version ",
                                  kCheckpointFormatVersion),
                     "load it with the tetra version that wrote it");
  }
  return manifest;
}

}  // namespace tetra
