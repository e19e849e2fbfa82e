#include "checkpoint/weight_files.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";
constexpr char kWeightsHint[] =
    "init_from takes a .safetensors file, a model.safetensors.index.json, or a Hugging Face model "
    "directory holding one of them (as save_pretrained writes it)";
// An index names a few thousand tensors; anything far larger is not one.
constexpr size_t kMaxIndexBytes = 256 << 20;

absl::Status IndexError(const std::string& path, const std::string& problem) {
  return UserError(
      absl::StrCat("sharded checkpoint index ", path, ": ", problem),
      "the index must be the model.safetensors.index.json that save_pretrained writes beside "
      "its shard files");
}

// Tensor name -> the index of the file holding it.
using FileOf = std::map<std::string, size_t, std::less<>>;

// The weights file `path` names: itself, or the index or the single file in
// the model directory it is.
absl::StatusOr<std::string> WeightsFileOf(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return path;
  const fs::path dir(path);
  if (fs::exists(dir / kIndexName, error)) return (dir / kIndexName).string();
  if (fs::exists(dir / kSingleName, error)) return (dir / kSingleName).string();
  const bool pickle = fs::exists(dir / "pytorch_model.bin", error) ||
                      fs::exists(dir / "pytorch_model.bin.index.json", error);
  return UserError(
      absl::StrCat("the directory ", path, " holds neither ", kSingleName, " nor ", kIndexName,
                   pickle ? " (only PyTorch pickle weights, which tetra does not read)" : ""),
      pickle ? "convert it to safetensors, e.g. load it in transformers and save_pretrained "
               "it again (safe_serialization is the default)"
             : kWeightsHint);
}

// Opens the shards the index `file`'s weight_map names, in order of first
// mention and each once, into `files`, and records where each tensor is.
absl::Status OpenShards(const std::string& file, const JsonValue& weight_map,
                        std::vector<SafetensorsFile>* files, FileOf* file_of) {
  std::map<std::string, size_t> shard_index;
  const fs::path dir = fs::path(file).parent_path();
  for (size_t i = 0; i < weight_map.keys.size(); ++i) {
    const std::string& tensor = weight_map.keys[i];
    const JsonValue& shard = weight_map.items[i];
    if (shard.kind != JsonValue::Kind::kString || shard.string.empty() ||
        shard.string.find('/') != std::string::npos || shard.string == "." ||
        shard.string == "..") {
      return IndexError(
          file, absl::StrCat("tensor ", UserText(tensor), " maps to ",
                             shard.kind == JsonValue::Kind::kString ? UserText(shard.string)
                                                                    : JsonKindName(shard.kind),
                             ", not the name of a shard file beside the index"));
    }
    auto [it, added] = shard_index.emplace(shard.string, files->size());
    if (added) {
      ASSIGN_OR_RETURN(SafetensorsFile opened,
                       SafetensorsFile::Open((dir / shard.string).string()));
      files->push_back(std::move(opened));
    }
    if ((*files)[it->second].Find(tensor) == nullptr) {
      return IndexError(file, absl::StrCat("tensor ", UserText(tensor), " is not in ", shard.string,
                                           ", the shard the index names for it"));
    }
    (*file_of)[tensor] = it->second;
  }
  return absl::OkStatus();
}

// Every tensor of every shard is listed, under that shard.
absl::Status CheckShardsListed(const std::string& file, const std::vector<SafetensorsFile>& files,
                               const FileOf& file_of) {
  for (size_t s = 0; s < files.size(); ++s) {
    for (const SafetensorsEntry& entry : files[s].entries()) {
      auto it = file_of.find(entry.name);
      if (it == file_of.end() || it->second != s) {
        return IndexError(
            file, absl::StrCat("shard ", files[s].path(), " holds tensor ", UserText(entry.name),
                               ", which the index ",
                               it == file_of.end()
                                   ? std::string("does not list")
                                   : absl::StrCat("places in ", files[it->second].path())));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string HfConfigPathOf(const std::string& path) {
  std::error_code error;
  // A file inside a model directory (its weights, a shard, the index) is
  // that directory's model as much as the directory itself is.
  fs::path dir = fs::is_directory(path, error) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const std::string config = (dir / "config.json").string();
  return fs::exists(config, error) ? config : "";
}

absl::StatusOr<WeightFiles> WeightFiles::Open(const std::string& path) {
  WeightFiles files;
  files.path_ = path;
  ASSIGN_OR_RETURN(const std::string file, WeightsFileOf(path));
  if (!absl::EndsWith(file, ".index.json")) {
    ASSIGN_OR_RETURN(SafetensorsFile single, SafetensorsFile::Open(file));
    files.files_.push_back(std::move(single));
    for (const SafetensorsEntry& entry : files.files_[0].entries()) files.file_of_[entry.name] = 0;
    return files;
  }

  ASSIGN_OR_RETURN(const JsonValue index, ReadJsonFile(file, kMaxIndexBytes, kWeightsHint));
  const JsonValue* weight_map = index.Find("weight_map");
  if (weight_map == nullptr || weight_map->kind != JsonValue::Kind::kObject) {
    return IndexError(file, "it has no \"weight_map\" object");
  }
  RETURN_IF_ERROR(OpenShards(file, *weight_map, &files.files_, &files.file_of_));
  RETURN_IF_ERROR(CheckShardsListed(file, files.files_, files.file_of_));
  return files;
}

std::vector<const SafetensorsEntry*> WeightFiles::entries() const {
  std::vector<const SafetensorsEntry*> all;
  for (const SafetensorsFile& file : files_) {
    for (const SafetensorsEntry& entry : file.entries()) all.push_back(&entry);
  }
  return all;
}

const SafetensorsEntry* WeightFiles::Find(std::string_view name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : files_[it->second].Find(name);
}

absl::Status WeightFiles::ReadF32(std::string_view name, float* out) const {
  auto it = file_of_.find(name);
  TETRA_CHECK(it != file_of_.end()) << "no tensor " << name << " in " << path_;
  return files_[it->second].ReadF32(name, out);
}

}  // namespace tetra
