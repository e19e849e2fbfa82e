#include "tools/checkpoint_command.h"

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/weights_io.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "tools/command_line.h"

namespace tetra {
namespace {

constexpr char kUsageHint[] =
    "tetra checkpoint inspect DIR | tetra checkpoint export DIR --out MODEL_DIR";

// The checkpoint at `path`, checked as resume checks it against the step its
// directory's name says, when it has a step_N name.
absl::StatusOr<CheckpointReader> OpenNamedCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path));
  std::filesystem::path name = std::filesystem::path(path).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "step_00000004/"
  if (const std::optional<int64_t> step = StepOfDirName(name.filename().string())) {
    RETURN_IF_ERROR(CheckStepMatchesName(reader.manifest(), *step, path));
  }
  return reader;
}

// DIR itself when it holds a manifest, else its newest complete step directory.
absl::StatusOr<CheckpointReader> OpenCheckpoint(const std::string& dir) {
  // Error codes, not exceptions: DIR may be anything (a symlink loop, a file).
  std::error_code error;
  if (std::filesystem::exists(std::filesystem::path(dir) / kManifestFileName, error) || error) {
    if (!std::filesystem::exists(std::filesystem::path(dir) / kCompleteMarkerName, error) &&
        !error) {
      std::cout
          << "tetra: warning: " << dir << " has no " << kCompleteMarkerName
          << " marker: its save did not finish, and its manifest cannot be checked against it\n";
    }
    return OpenNamedCheckpoint(dir);
  }
  ASSIGN_OR_RETURN(const std::optional<CheckpointEntry> entry,
                   NewestCompleteCheckpoint(dir, std::cout));
  if (!entry) {
    return UserError(
        absl::StrCat(dir, " holds no complete checkpoint (no step_NNNNNNNN directory with a ",
                     kCompleteMarkerName, " marker)"),
        "point at a checkpoint.dir or one of its step directories");
  }
  return OpenNamedCheckpoint(entry->path);
}

absl::Status Inspect(const CheckpointReader& reader) {
  const CheckpointManifest& m = reader.manifest();
  const CheckpointLayout& l = m.layout();
  const ModelConfig& model = m.config().model();
  std::cout << absl::StrFormat(
      "checkpoint %s (format %d)\n"
      "  step %d, %d samples consumed (global batch %d), seed %d\n"
      "  written by %d ranks: tensor %d x pipeline %d x data %d, expert %d, virtual stages %d, "
      "ZeRO-%d\n"
      "  model: %d layers, hidden %d, %d heads (%d key-value), intermediate %d, vocab %d%s\n",
      reader.dir(), m.format_version(), m.state().step(), m.state().consumed_samples(),
      m.state().global_batch_size(), m.state().seed(), l.world(), l.tensor(), l.pipeline(),
      l.data(), l.expert(), l.virtual_stages(), l.zero_stage(), model.num_hidden_layers(),
      model.hidden_size(), model.num_attention_heads(),
      model.num_key_value_heads() ? model.num_key_value_heads() : model.num_attention_heads(),
      model.intermediate_size(), model.vocab_size(),
      model.tie_word_embeddings() ? ", tied embeddings" : "");
  int64_t parameters = 0, shards = 0, bytes = 0;
  for (const TensorRecord& tensor : m.tensors()) {
    // Reading the whole tensor checks every shard's size and CRC and that they cover it.
    RETURN_IF_ERROR(reader.ReadGlobal(tensor).status());
    const Shape shape(tensor.shape().begin(), tensor.shape().end());
    if (tensor.kind() == TensorRecord::WEIGHT) parameters += NumElements(shape);
    shards += tensor.shards_size();
    for (const ShardRecord& shard : tensor.shards()) bytes += static_cast<int64_t>(shard.bytes());
    std::cout << absl::StrFormat("  %-10s %-48s %-12s %d shard%s\n", KindName(tensor.kind()),
                                 tensor.name(), ShapeString(shape), tensor.shards_size(),
                                 tensor.shards_size() == 1 ? "" : "s");
  }
  std::cout << absl::StrFormat(
      "  %d tensors, %d parameters, %d files, %d bytes of data: all %d shard checksums verified\n",
      m.tensors_size(), parameters, m.files_size(), bytes, shards);
  return absl::OkStatus();
}

// The same model directory as the run's own export_path: weights, config.json,
// generation_config.json, and the tokenizer files of the run's init_from.
absl::Status Export(const CheckpointReader& reader, const std::string& out, DType dtype) {
  const CheckpointManifest& manifest = reader.manifest();
  std::vector<NamedTensor> globals;
  for (const TensorRecord& tensor : manifest.tensors()) {
    // Weights and buffers (MoE correction biases) are the model; moments are not.
    if (tensor.kind() != TensorRecord::WEIGHT && tensor.kind() != TensorRecord::BUFFER) continue;
    ASSIGN_OR_RETURN(Tensor global, reader.ReadGlobal(tensor));
    globals.push_back({tensor.name(), global});
  }
  const std::string& origin = manifest.config().init_from();
  ASSIGN_OR_RETURN(
      const std::vector<std::string> copied,
      WriteHfModelDirectory(
          out, globals, manifest.config().model(), manifest.config().train().seq_length(), dtype,
          {.metadata = {{"step", absl::StrCat(manifest.state().step())}}, .origin = origin}));
  std::cout << "tetra: wrote " << globals.size() << " tensors of step " << manifest.state().step()
            << " with config.json to " << out << "\n";
  if (!copied.empty()) {
    std::cout << "tetra: with " << absl::StrJoin(copied, ", ") << " from the run's init_from "
              << origin << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckpointCommand(int argc, char** argv) {
  const std::string action = argc >= 3 ? argv[2] : "";
  if ((action != "inspect" && action != "export") || argc < 4 ||
      std::string(argv[3]).rfind("--", 0) == 0) {
    return UserError(
        "tetra checkpoint needs an action (inspect or export) and a checkpoint directory",
        kUsageHint);
  }
  const std::string dir = argv[3];
  if (action == "inspect") {
    RETURN_IF_ERROR(ParseFlags(argc, argv, 4, "checkpoint inspect", {}).status());
    ASSIGN_OR_RETURN(CheckpointReader reader, OpenCheckpoint(dir));
    return Inspect(reader);
  }
  ASSIGN_OR_RETURN(ParsedFlags flags,
                   ParseFlags(argc, argv, 4, "checkpoint export", {"out", "dtype"}));
  if (!flags.values.count("out")) {
    return UserError(
        "tetra checkpoint export needs --out MODEL_DIR",
        "tetra checkpoint export DIR --out exported/ (a Hugging Face model directory)");
  }
  ASSIGN_OR_RETURN(const DType dtype, ExportDTypeFlag(flags));
  ASSIGN_OR_RETURN(CheckpointReader reader, OpenCheckpoint(dir));
  return Export(reader, flags.values.at("out"), dtype);
}

}  // namespace tetra
