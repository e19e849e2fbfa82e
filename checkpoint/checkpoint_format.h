// The on-disk shape of a checkpoint (proto/checkpoint.proto): one directory
// per step holding
//   manifest.pb      the CheckpointManifest (binary protobuf), written by rank 0
//   rank_00000.bin   one data file per rank: raw little-endian shards
//   COMPLETE         the completion marker, written last: the step and the
//                    CRC-32C of manifest.pb's bytes
// and the helpers that turn a rank's slice of a parameter into the global
// box it holds. Loading speaks only of global names and element indices, so
// any layout reads what any other wrote. Each shard's CRC-32C covers the
// record that places it (tensor name, kind, global shape, box, flat range)
// before its data, so a manifest whose records were swapped (two names, or
// exp_avg and exp_avg_sq) fails the check of the shard it misplaces even
// where the bytes are untouched.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_FORMAT_H_
#define TETRA_CHECKPOINT_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "proto/checkpoint.pb.h"

namespace tetra {

// Bumped on any change a reader of the previous version would misread.
// 2: shard checksums cover their records; COMPLETE holds the manifest's.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr char kManifestFileName[] = "manifest.pb";
inline constexpr char kCompleteMarkerName[] = "COMPLETE";
// The hint of every error that finds a checkpoint damaged.
inline constexpr char kDamagedCheckpointHint[] =
    "the checkpoint is damaged: remove this step directory to resume from the previous one";

// "rank_00003.bin"
std::string RankFileName(int rank);

// "weight", "exp_avg", "exp_avg_sq", "buffer"
std::string KindName(TensorRecord::Kind kind);

// The box of the global tensor that a tensor-parallel `shard` of `global_shape`
// holds: its real elements (padding rows hold none; a box may be empty), in
// the slice's order, first.
std::vector<DimRange> ShardBox(const Shape& global_shape, const TensorShard& shard);
int64_t BoxNumElements(const std::vector<DimRange>& box);
// "[0:8, 16:32]"
std::string BoxString(const std::vector<DimRange>& box);

// The CRC-32C of `shard` of `tensor`: of its record's place in the global
// tensor, then of its `shard.bytes()` bytes of data at `data`.
uint32_t ShardCrc32c(const TensorRecord& tensor, const ShardRecord& shard, const void* data);

// The text of the COMPLETE marker of a checkpoint at `step` whose manifest
// is `manifest_bytes`.
std::string CompleteMarkerText(int64_t step, std::string_view manifest_bytes);

// Reads and parses `dir`/manifest.pb and, when `dir` has a COMPLETE marker,
// checks the manifest's bytes against the checksum it holds. A missing,
// unreadable, unparsable or altered file, or another format version, is a
// UserError naming the file.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_FORMAT_H_
