#include "checkpoint/checkpoint_compatibility.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_format.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace tetra {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr char kNotThisRunHint[] =
    "resume with the settings of the run that wrote it, point checkpoint.dir at another directory, "
    "or set checkpoint.resume: false to start afresh";

struct FieldDifference {
  std::string field;  // its dotted path, "model.intermediate_size"
  std::string saved, ours;
};

// A field's value as a message shows it: strings quoted (UserText), every
// other scalar in text format (doubles in their shortest exact form, so two
// values print alike only when they are equal); unset fields give their
// defaults.
std::string FieldText(const Message& message, const FieldDescriptor* field) {
  const Reflection* reflection = message.GetReflection();
  auto one = [&](int index) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      return UserText(index < 0 ? reflection->GetString(message, field)
                                : reflection->GetRepeatedString(message, field, index));
    }
    std::string text;
    google::protobuf::TextFormat::PrintFieldValueToString(message, field, index, &text);
    return text;
  };
  if (!field->is_repeated()) return one(-1);
  std::vector<std::string> values;
  for (int i = 0; i < reflection->FieldSize(message, field); ++i) values.push_back(one(i));
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// The first field of `saved` and `ours` (one message type), in declaration
// order and depth first, whose values differ; fields named in `skip` (dotted
// paths) are left out.
std::optional<FieldDifference> FirstDifference(const Message& saved, const Message& ours,
                                               const std::string& prefix,
                                               const std::vector<std::string>& skip = {}) {
  const google::protobuf::Descriptor* type = saved.GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    const std::string path = absl::StrCat(prefix, ".", field->name());
    if (std::find(skip.begin(), skip.end(), path) != skip.end()) continue;
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated()) {
      const std::optional<FieldDifference> inner =
          FirstDifference(saved.GetReflection()->GetMessage(saved, field),
                          ours.GetReflection()->GetMessage(ours, field), path, skip);
      if (inner) return inner;
      continue;
    }
    std::string a = FieldText(saved, field), b = FieldText(ours, field);
    if (a != b) return FieldDifference{path, std::move(a), std::move(b)};
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckResumeStep(const TrainerConfig& config, int64_t step, const std::string& path) {
  const int steps = config.train().steps();
  if (step > std::numeric_limits<int>::max()) {
    return UserError(
        absl::StrCat("checkpoint ", path, " is at step ", step, ", beyond the ",
                     std::numeric_limits<int>::max(),
                     " steps a run counts to (train.steps is an int32): it is not one tetra wrote"),
        "remove it, or point checkpoint.dir at another directory", absl::StatusCode::kDataLoss);
  }
  if (step > steps) {
    return UserError(
        absl::StrCat("checkpoint ", path, " is at step ", step, ", beyond train.steps ", steps,
                     ": the run would have nothing to continue"),
        absl::StrCat("set train.steps above ", step,
                     " to train on, point checkpoint.dir at another "
                     "directory, or set checkpoint.resume: false to start afresh"));
  }
  return absl::OkStatus();
}

absl::Status CheckStepMatchesName(const CheckpointManifest& manifest, int64_t step,
                                  const std::string& path) {
  if (manifest.state().step() == step) return absl::OkStatus();
  return UserError(absl::StrCat("checkpoint ", path, " is named for step ", step,
                                " but its manifest says step ", manifest.state().step()),
                   kDamagedCheckpointHint, absl::StatusCode::kDataLoss);
}

absl::Status CheckResumable(const TrainerConfig& config, const CheckpointManifest& manifest,
                            int64_t step, const std::string& path) {
  const TrainingState& state = manifest.state();
  RETURN_IF_ERROR(CheckStepMatchesName(manifest, step, path));
  RETURN_IF_ERROR(CheckResumeStep(config, step, path));
  // step <= train.steps (an int) and the batch size is an int: no overflow.
  const int64_t batch = config.train().global_batch_size();
  if (state.consumed_samples() != step * batch) {
    return UserError(
        absl::StrCat("checkpoint ", path, " is at step ", step, " after ", state.consumed_samples(),
                     " samples, but train.global_batch_size ", batch, " would have consumed ",
                     step * batch),
        absl::StrCat("resume with train.global_batch_size ", state.global_batch_size(),
                     ", the batch size that wrote it"));
  }
  const TrainerConfig& saved = manifest.config();
  std::optional<FieldDifference> difference;
  if (saved.train().seed() != config.train().seed()) {
    difference = FieldDifference{"train.seed", absl::StrCat(saved.train().seed()),
                                 absl::StrCat(config.train().seed())};
  }
  // Checkpoints hold the vocabulary unpadded: its padding may change like the layout.
  if (!difference) {
    difference = FirstDifference(saved.model(), config.model(), "model",
                                 {"model.make_vocab_size_divisible_by"});
  }
  // The validation set is read only for evaluation: it may change.
  if (!difference)
    difference = FirstDifference(saved.data(), config.data(), "data", {"data.valid_path"});
  if (difference) {
    return UserError(absl::StrCat("checkpoint ", path, " was written by a run with ",
                                  difference->field, " ", difference->saved, ", but this run has ",
                                  difference->ours, ": it is another run's checkpoint"),
                     kNotThisRunHint);
  }
  return absl::OkStatus();
}

}  // namespace tetra
