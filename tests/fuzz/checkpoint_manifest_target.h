// The check of one checkpoint manifest fuzz input (the gtest campaign and
// tools/fuzz/checkpoint_manifest_fuzzer.cc): the input is a manifest.pb
// written into a checkpoint directory whose data files stay as the writer
// made them. CheckpointReader::Open and ReadGlobal of every tensor either
// fail with a short UserError or succeed on a manifest whose every shard
// record an independent check finds consistent (its box inside the tensor's
// shape, its flat range inside the box, its byte count that of the range),
// and each global tensor read has the tensor's shape.
#ifndef TETRA_TESTS_FUZZ_CHECKPOINT_MANIFEST_TARGET_H_
#define TETRA_TESTS_FUZZ_CHECKPOINT_MANIFEST_TARGET_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "tests/testing/fuzzing.h"

namespace tetra::testing {

inline std::string ShardRecordProblem(const TensorRecord& tensor, const ShardRecord& shard) {
  if (shard.box_size() != tensor.shape_size()) return "accepted a box of another rank";
  unsigned __int128 box_numel = 1;
  for (int d = 0; d < shard.box_size(); ++d) {
    const DimRange& r = shard.box(d);
    if (r.begin() < 0 || r.begin() > r.end() || r.end() > tensor.shape(d)) {
      return "accepted a box outside the shape";
    }
    box_numel *= static_cast<uint64_t>(r.end() - r.begin());
  }
  if (shard.flat_begin() < 0 || shard.flat_begin() > shard.flat_end() ||
      static_cast<unsigned __int128>(shard.flat_end()) > box_numel) {
    return "accepted a flat range outside the box";
  }
  if (static_cast<unsigned __int128>(shard.bytes()) !=
      static_cast<unsigned __int128>(shard.flat_end() - shard.flat_begin()) * 4) {
    return "accepted a byte count that is not the range's";
  }
  return "";
}

inline std::string CheckpointManifestProblem(const std::string& manifest, const std::string& dir) {
  if (!WriteWholeFile(dir + "/" + kManifestFileName, manifest)) return "cannot write the manifest";
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir);
  if (!reader.ok()) return UserErrorProblem(reader.status(), {dir});
  for (const TensorRecord& tensor : reader->manifest().tensors()) {
    unsigned __int128 numel = 1;
    for (int64_t d : tensor.shape()) {
      if (d < 0) return "accepted a negative dim";
      numel *= static_cast<uint64_t>(d);
      if (numel > static_cast<unsigned __int128>(INT64_MAX)) return "accepted a shape past int64";
    }
    for (const ShardRecord& shard : tensor.shards()) {
      if (std::string p = ShardRecordProblem(tensor, shard); !p.empty()) return p;
    }
    const TensorRecord* found = reader->Find(tensor.name(), tensor.kind());
    if (found == nullptr) return "Find misses a tensor of the manifest";
    absl::StatusOr<Tensor> global = reader->ReadGlobal(*found);
    if (!global.ok()) {
      if (std::string p = UserErrorProblem(global.status(), {dir}); !p.empty()) return p;
      continue;
    }
    if (global->shape() != Shape(found->shape().begin(), found->shape().end())) {
      return "ReadGlobal returned another shape";
    }
  }
  return "";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_CHECKPOINT_MANIFEST_TARGET_H_
