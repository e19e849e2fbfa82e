// Reading a checkpoint directory, whatever layout wrote it: any box of any
// global tensor is assembled from the shards that overlap it (a tensor-
// parallel slice, a ZeRO-1 flat piece, a whole tensor), every shard read is
// checked against its CRC-32C, and every element of the box must be covered.
// Truncated files, flipped bits and manifests that do not add up are errors
// naming the file and the tensor: never a silent wrong load.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_READER_H_
#define TETRA_CHECKPOINT_CHECKPOINT_READER_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/input_file.h"
#include "core/tensor.h"
#include "proto/checkpoint.pb.h"

namespace tetra {

class CheckpointReader {
 public:
  // Reads `dir`/manifest.pb (checked against the COMPLETE marker's checksum
  // when there is one) and checks that every record is consistent: each
  // tensor once, with a shape a tensor can have, its shards inside it (a box
  // inside the global shape, a flat range inside the box, a byte count that
  // of the range) and together holding at least its elements. Does not read
  // the data files.
  static absl::StatusOr<CheckpointReader> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  // nullptr when the checkpoint has no such tensor.
  const TensorRecord* Find(std::string_view name, TensorRecord::Kind kind) const;

  // The elements of `box` (one range per dim) of `tensor`, as a tensor of the
  // box's shape in row-major order (fp32). The shards it reads are checked
  // against their files' sizes before the box is allocated, so what a
  // manifest claims never allocates more than its files hold.
  absl::StatusOr<Tensor> ReadBox(const TensorRecord& tensor,
                                 const std::vector<DimRange>& box) const;
  // The whole global tensor (so reading every tensor checks every shard).
  absl::StatusOr<Tensor> ReadGlobal(const TensorRecord& tensor) const;

 private:
  CheckpointReader() = default;
  // The file of one shard, checked to hold the shard's bytes.
  absl::StatusOr<InputFile> OpenShard(const TensorRecord& tensor, const ShardRecord& shard) const;
  // The bytes of one shard, checked against the file's size and the CRC.
  absl::StatusOr<std::string> ReadShard(const TensorRecord& tensor, const ShardRecord& shard) const;
  // `held` of `box`'s elements of `tensor` are in the manifest's shards.
  absl::Status MissingElementsError(const TensorRecord& tensor, int64_t held,
                                    const std::vector<DimRange>& box) const;

  std::string dir_;
  CheckpointManifest manifest_;
  std::map<std::pair<std::string, int>, int, std::less<>> index_;  // (name, kind) -> tensors index
};

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_READER_H_
