// WeightFiles: the tensors of a Hugging Face checkpoint by name, whichever
// way it is stored: one .safetensors file, a sharded checkpoint's
// model.safetensors.index.json with the shard files it names, or a model
// directory as `save_pretrained` writes it (holding either, and config.json).
// Every file is validated when opened; an index and its shards must agree
// (each tensor in the file the index names for it, and nowhere else).
#ifndef TETRA_CHECKPOINT_WEIGHT_FILES_H_
#define TETRA_CHECKPOINT_WEIGHT_FILES_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/safetensors.h"

namespace tetra {

class WeightFiles {
 public:
  static absl::StatusOr<WeightFiles> Open(const std::string& path);

  // What Open was given, for messages.
  const std::string& path() const { return path_; }
  // Every tensor, file by file in the index's (or the directory's) order.
  std::vector<const SafetensorsEntry*> entries() const;
  const SafetensorsEntry* Find(std::string_view name) const;  // nullptr when absent
  // SafetensorsFile::ReadF32 on the file holding `name` (which must exist).
  absl::Status ReadF32(std::string_view name, float* out) const;

 private:
  WeightFiles() = default;

  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> file_of_;  // tensor name -> files_ index
};

// The config.json of the model directory `path` is, or holds `path` (a
// weights file, a shard or the index inside it); "" when there is none.
std::string HfConfigPathOf(const std::string& path);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_WEIGHT_FILES_H_
