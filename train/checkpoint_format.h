// The on-disk shape of a checkpoint (proto/checkpoint.proto): one directory
// per step holding
//   manifest.pb      the CheckpointManifest (binary protobuf), written by rank 0
//   rank_00000.bin   one data file per rank: raw little-endian shards
//   COMPLETE         the completion marker, written last
// and the helpers that turn a rank's slice of a parameter into the global
// box it holds. Loading speaks only of global names and element indices, so
// any layout reads what any other wrote.
#ifndef TETRA_TRAIN_CHECKPOINT_FORMAT_H_
#define TETRA_TRAIN_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "proto/checkpoint.pb.h"

namespace tetra {

// Bumped on any change a reader of the previous version would misread.
inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr char kManifestFileName[] = "manifest.pb";
inline constexpr char kCompleteMarkerName[] = "COMPLETE";

// "rank_00003.bin"
std::string RankFileName(int rank);

// "weight", "exp_avg", "exp_avg_sq", "buffer"
std::string KindName(TensorRecord::Kind kind);

// The box of the global tensor that a tensor-parallel `shard` of `global_shape` holds.
std::vector<DimRange> ShardBox(const Shape& global_shape, const TensorShard& shard);
int64_t BoxNumElements(const std::vector<DimRange>& box);
// "[0:8, 16:32]"
std::string BoxString(const std::vector<DimRange>& box);

// Reads and parses `dir`/manifest.pb; a missing, unreadable or unparsable
// file, or another format version, is a UserError naming the file.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir);

}  // namespace tetra

#endif  // TETRA_TRAIN_CHECKPOINT_FORMAT_H_
