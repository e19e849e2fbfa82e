// Loading a TrainerConfig: text-format parsing with file:line:column errors,
// `--set path.to.field=value` overrides through protobuf reflection, and the
// nearest valid name when a field name is misspelled.
#ifndef TETRA_TRAIN_CONFIG_LOADER_H_
#define TETRA_TRAIN_CONFIG_LOADER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace tetra {

// Parses `text` (named `source` in messages) in protobuf text format.
absl::StatusOr<TrainerConfig> ParseConfigText(std::string_view text, const std::string& source);

// Reads and parses the file at `path`.
absl::StatusOr<TrainerConfig> LoadConfigFile(const std::string& path);

// Applies one override "a.b.c=value" to a scalar (or enum) field of
// `config`; a repeated scalar field takes a comma list, which replaces it
// ("parallel.pipeline_layers=4,3,3,3"; an empty value empties it).
absl::Status ApplyOverride(std::string_view assignment, TrainerConfig* config);

// With init_from a Hugging Face model directory, the model section becomes
// its config.json's; fields the config sets itself must agree with it.
absl::Status TakeModelFromHfDirectory(TrainerConfig* config);

// Defaults that depend on other fields: parallel.schedule DUALPIPE_V with
// virtual_stages unset runs its 2 chunks per rank.
void ApplyScheduleDefaults(TrainerConfig* config);

// The recipe as every command reads it: LoadConfigFile, each override in
// order, TakeModelFromHfDirectory (the model of init_from's config.json),
// ApplyScheduleDefaults. No check against a world size (tetra plan and
// report weigh layouts of any size).
absl::StatusOr<TrainerConfig> LoadRecipe(const std::string& path,
                                         const std::vector<std::string>& overrides);

// LoadRecipe, then ValidateConfig for a job of `world_size` ranks.
absl::StatusOr<TrainerConfig> LoadConfig(const std::string& path,
                                         const std::vector<std::string>& overrides, int world_size);

}  // namespace tetra

#endif  // TETRA_TRAIN_CONFIG_LOADER_H_
