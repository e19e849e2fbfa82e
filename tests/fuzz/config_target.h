// The checks of one config fuzz input (the gtest campaign and
// tools/fuzz/config_fuzzer.cc): the text format (ParseConfigText) and `--set`
// overrides (ApplyOverride) either fail with a short UserError or accept an
// input that an independent check confirms: a parsed config prints and parses
// back to the same message; an accepted override names, by its dotted path,
// a scalar field that is now set, or a repeated scalar field now holding one
// element per item of the value's comma list.
#ifndef TETRA_TESTS_FUZZ_CONFIG_TARGET_H_
#define TETRA_TESTS_FUZZ_CONFIG_TARGET_H_

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/testing/fuzzing.h"
#include "train/config_loader.h"

namespace tetra::testing {

inline std::string ConfigTextProblem(const std::string& text) {
  absl::StatusOr<TrainerConfig> config = ParseConfigText(text, "fuzz.textproto");
  if (!config.ok()) return UserErrorProblem(config.status());
  std::string printed;
  if (!google::protobuf::TextFormat::PrintToString(*config, &printed)) {
    return "the config does not print";
  }
  TrainerConfig again;
  if (!google::protobuf::TextFormat::ParseFromString(printed, &again)) {
    return "its printing does not parse";
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(*config, again)) {
    return "printing and parsing again changes the config";
  }
  return "";
}

inline std::string ConfigSetProblem(const std::string& assignment) {
  TrainerConfig config;
  const absl::Status status = ApplyOverride(assignment, &config);
  if (!status.ok()) return UserErrorProblem(status);
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) return "accepted an assignment without path=value";
  const google::protobuf::Message* message = &config;
  const std::vector<std::string> parts = absl::StrSplit(assignment.substr(0, eq), '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const google::protobuf::FieldDescriptor* field =
        message->GetDescriptor()->FindFieldByName(parts[i]);
    if (field == nullptr) return "accepted a path that names no field";
    const bool last = i + 1 == parts.size();
    const bool is_message = field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE;
    if (last == is_message) return "accepted a path that does not end at a scalar";
    if (field->is_repeated()) {
      if (!last) return "accepted a path through a repeated field";
      const std::vector<std::string> items =
          absl::StrSplit(assignment.substr(eq + 1), ',', absl::SkipEmpty());
      if (message->GetReflection()->FieldSize(*message, field) != static_cast<int>(items.size())) {
        return "the repeated field does not hold one element per item of the comma list";
      }
      return "";
    }
    if (!message->GetReflection()->HasField(*message, field)) return "the field is not set";
    if (!last) message = &message->GetReflection()->GetMessage(*message, field);
  }
  return "";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_CONFIG_TARGET_H_
