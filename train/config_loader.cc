#include "train/config_loader.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/weight_files.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "train/config_validation.h"

namespace tetra {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "did you mean "x"?" for the field of `type` the user most likely meant: the
// closest by edit distance if it is close; else the only field that the typed
// name begins or is begun by ("hidden" -> "hidden_size", "lr_max" -> "lr");
// else the only field containing it ("layers" -> "num_hidden_layers"). Several
// such fields are all offered; with none, the list of all fields.
std::string NearestFieldHint(const Descriptor* type, const std::string& name) {
  // Far longer than any field name: not a typo of one (and edit distances
  // over a huge name would take a while).
  constexpr size_t kMaxNameChars = 256;
  if (name.size() > kMaxNameChars) {
    std::vector<std::string> names;
    for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
    return absl::StrCat("the fields of ", type->name(), " are ", absl::StrJoin(names, ", "));
  }
  const FieldDescriptor* best = nullptr;
  size_t best_distance = 0;
  std::vector<std::string> prefixed, containing, related;
  for (int i = 0; i < type->field_count(); ++i) {
    const std::string& field = type->field(i)->name();
    size_t d = EditDistance(name, field);
    if (best == nullptr || d < best_distance) {
      best = type->field(i);
      best_distance = d;
    }
    // Below 3 letters a shared prefix or substring says little about intent.
    if (name.size() < 3) continue;
    const bool prefix = field.starts_with(name) || name.starts_with(field);
    const bool contains = field.find(name) != std::string::npos;
    if (prefix) prefixed.push_back(field);
    if (contains) containing.push_back(field);
    if (prefix || contains) related.push_back(absl::StrCat("\"", field, "\""));
  }
  if (best != nullptr && best_distance <= std::max<size_t>(2, name.size() / 3)) {
    return absl::StrCat("did you mean \"", best->name(), "\"?");
  }
  if (prefixed.size() == 1) return absl::StrCat("did you mean \"", prefixed[0], "\"?");
  if (containing.size() == 1) return absl::StrCat("did you mean \"", containing[0], "\"?");
  if (!related.empty()) {
    return absl::StrCat("did you mean one of ", absl::StrJoin(related, ", "), "?");
  }
  std::vector<std::string> names;
  for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
  return absl::StrCat("the fields of ", type->name(), " are ", absl::StrJoin(names, ", "));
}

std::string EnumNames(const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) names.push_back(type->value(i)->name());
  return absl::StrJoin(names, ", ");
}

// "<path> takes one of A, B" for every enum field named `name` under `type`
// (the text-format parser names the field but not its message).
void DescribeEnumFields(const Descriptor* type, const std::string& name, const std::string& prefix,
                        int depth, std::vector<std::string>* out) {
  constexpr int kMaxDepth = 8;  // a guard against recursive message types
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    const std::string path = prefix + field->name();
    if (field->enum_type() != nullptr && field->name() == name) {
      out->push_back(absl::StrCat(path, " takes one of ", EnumNames(field->enum_type())));
    } else if (field->message_type() != nullptr && depth < kMaxDepth) {
      DescribeEnumFields(field->message_type(), name, path + ".", depth + 1, out);
    }
  }
}

// The text between `open` (e.g. `field "`) and the next quote in `message`;
// empty when `open` is absent.
std::string Quoted(const std::string& message, std::string_view open) {
  size_t begin = message.find(open);
  if (begin == std::string::npos) return "";
  begin += open.size();
  size_t end = message.find('"', begin);
  return end == std::string::npos ? "" : message.substr(begin, end - begin);
}

// A `--set` path as typed: as is when it reads like one, else quoted short
// (UserText), so a hostile path never floods the terminal.
std::string ShownPath(std::string_view path) {
  constexpr size_t kMaxPlainChars = 128;
  const bool plain =
      path.size() <= kMaxPlainChars && std::all_of(path.begin(), path.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
      });
  return plain ? std::string(path) : UserText(path);
}

// Keeps the first parse error as "line:column: what" plus a hint: the nearest
// name for an unknown field, the valid names for an unknown enum value.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!what_.empty()) return;
    const std::string where = absl::StrCat(line + 1, ":", column + 1, ": ");
    // protobuf's message quotes the offending token whole; a long or binary
    // one is shown short.
    constexpr size_t kMaxPlainChars = 200;
    const bool plain =
        message.size() <= kMaxPlainChars &&
        std::all_of(message.begin(), message.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    what_ = where + (plain ? message : UserText(message, kMaxPlainChars));
    hint_ = "the config is protobuf text format; see configs/tiny_dense.textproto";
    // protobuf 3.21 says: Message type "tetra.ModelConfig" has no field named "x".
    const std::string type_name = Quoted(message, "Message type \"");
    const std::string field = Quoted(message, "has no field named \"");
    const Descriptor* type =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
    if (type != nullptr && !field.empty()) {
      what_ = absl::StrCat(where, type->name(), " has no field ", UserText(field));
      hint_ = NearestFieldHint(type, field);
      return;
    }
    // ... and: Unknown enumeration value of "CSV" for field "format".
    if (message.find("Unknown enumeration value") != std::string::npos) {
      std::vector<std::string> choices;
      DescribeEnumFields(TrainerConfig::descriptor(), Quoted(message, "for field \""), "", 0,
                         &choices);
      if (!choices.empty()) hint_ = absl::StrJoin(choices, "; ");
    }
  }
  absl::Status Error(const std::string& source) const {
    return UserError(absl::StrCat(source, ":", what_), hint_);
  }

 private:
  std::string what_;
  std::string hint_;
};

// The field's default as `--set` would take it, for examples in hints.
std::string DefaultText(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(field->default_value_int32());
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(field->default_value_int64());
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(field->default_value_uint32());
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(field->default_value_uint64());
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrCat(field->default_value_double());
    case FieldDescriptor::CPPTYPE_FLOAT:
      return absl::StrCat(field->default_value_float());
    case FieldDescriptor::CPPTYPE_BOOL:
      return field->default_value_bool() ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return field->default_value_enum()->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return "VALUE";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "VALUE";
}

// Reflection's SetX for a singular field, AddX for a repeated one.
template <typename Setter, typename T>
void Store(Message* message, const FieldDescriptor* field, Setter set, Setter add, T value) {
  const Reflection* reflection = message->GetReflection();
  (reflection->*(field->is_repeated() ? add : set))(message, field, value);
}

// Parses `text` as `field`'s numeric type and stores it; what the type
// expects ("a 32-bit integer") when `text` is not one.
std::optional<std::string> StoreNumber(Message* message, const FieldDescriptor* field,
                                       const std::string& text) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return "a 32-bit integer";
      Store(message, field, &Reflection::SetInt32, &Reflection::AddInt32, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return "a 64-bit integer";
      Store(message, field, &Reflection::SetInt64, &Reflection::AddInt64, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return "an unsigned 32-bit integer";
      Store(message, field, &Reflection::SetUInt32, &Reflection::AddUInt32, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return "an unsigned 64-bit integer";
      Store(message, field, &Reflection::SetUInt64, &Reflection::AddUInt64, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return "a number";
      Store(message, field, &Reflection::SetDouble, &Reflection::AddDouble, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v)) return "a number";
      Store(message, field, &Reflection::SetFloat, &Reflection::AddFloat, v);
      break;
    }
    default:
      break;
  }
  return std::nullopt;
}

// Parses `value` as `field`'s type and sets it, or appends it to a repeated field.
absl::Status SetScalar(Message* message, const FieldDescriptor* field, const std::string& value,
                       const std::string& path) {
  auto bad = [&](const std::string& expected) {
    return UserError(
        absl::StrCat("--set ", path, ": ", UserText(value), " is not ", expected),
        absl::StrCat("write ", expected, ", e.g. --set ", path, "=", DefaultText(field)));
  };
  const std::string& text = value;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (const std::optional<std::string> expected = StoreNumber(message, field, text)) {
        return bad(*expected);
      }
      break;
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return bad("true or false");
      Store(message, field, &Reflection::SetBool, &Reflection::AddBool, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      Store(message, field, &Reflection::SetString, &Reflection::AddString, text);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* enum_value = field->enum_type()->FindValueByName(text);
      if (enum_value == nullptr) {
        return bad(absl::StrCat("one of ", EnumNames(field->enum_type())));
      }
      Store(message, field, &Reflection::SetEnum, &Reflection::AddEnum, enum_value);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      const FieldDescriptor* first = field->message_type()->field(0);
      return UserError(
          absl::StrCat("--set ", path, ": ", field->name(), " is a message, not a scalar"),
          absl::StrCat("name one of its fields, e.g. --set ", path, ".", first->name(), "=",
                       DefaultText(first)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainerConfig> ParseConfigText(std::string_view text, const std::string& source) {
  TrainerConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) return errors.Error(source);
  return config;
}

absl::StatusOr<TrainerConfig> LoadConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadInputFile(path, "config file",
                                 "pass --config with a path to a .textproto file, e.g. "
                                 "configs/tiny_dense.textproto"));
  return ParseConfigText(text, path);
}

absl::Status ApplyOverride(std::string_view assignment, TrainerConfig* config) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return UserError(
        absl::StrCat("--set ", ShownPath(assignment), ": expected path.to.field=value"),
        "e.g. --set train.steps=20");
  }
  const std::string path(assignment.substr(0, eq));
  const std::string value(assignment.substr(eq + 1));
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  Message* message = config;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Descriptor* type = message->GetDescriptor();
    const FieldDescriptor* field = type->FindFieldByName(parts[i]);
    if (field == nullptr) {
      return UserError(absl::StrCat("--set ", ShownPath(path), ": ", type->name(), " has no field ",
                                    UserText(parts[i])),
                       NearestFieldHint(type, parts[i]));
    }
    bool last = i + 1 == parts.size();
    if (field->is_repeated()) {
      if (!last || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        return UserError(
            absl::StrCat("--set ", ShownPath(path), ": ", parts[i], " is a repeated message field"),
            "set it in the config file");
      }
      // A comma list replaces the whole field ("" empties it).
      message->GetReflection()->ClearField(message, field);
      for (absl::string_view element : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        RETURN_IF_ERROR(SetScalar(message, field, std::string(element), path));
      }
      return absl::OkStatus();
    }
    if (!last) {
      if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        const std::string scalar_path = absl::StrJoin(parts.begin(), parts.begin() + i + 1, ".");
        return UserError(
            absl::StrCat("--set ", ShownPath(path), ": ", parts[i],
                         " is a scalar and has no fields"),
            absl::StrCat("set it directly, e.g. --set ", scalar_path, "=", DefaultText(field)));
      }
      message = message->GetReflection()->MutableMessage(message, field);
      continue;
    }
    return SetScalar(message, field, value, path);
  }
  return absl::OkStatus();
}

absl::Status TakeModelFromHfDirectory(TrainerConfig* config) {
  const std::string config_json = HfConfigPathOf(config->init_from());
  if (config_json.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const ModelConfig hf, ReadHfConfigJson(config_json));
  ASSIGN_OR_RETURN(*config->mutable_model(), MergeWithHfConfig(config->model(), hf, config_json));
  return absl::OkStatus();
}

void ApplyScheduleDefaults(TrainerConfig* config) {
  ParallelConfig* parallel = config->mutable_parallel();
  // DualPipeV runs two chunks per rank: unset, virtual_stages means that.
  if (parallel->schedule() == ParallelConfig::DUALPIPE_V && !parallel->has_virtual_stages()) {
    parallel->set_virtual_stages(2);
  }
}

absl::StatusOr<TrainerConfig> LoadRecipe(const std::string& path,
                                         const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(TrainerConfig config, LoadConfigFile(path));
  for (const std::string& assignment : overrides)
    RETURN_IF_ERROR(ApplyOverride(assignment, &config));
  RETURN_IF_ERROR(TakeModelFromHfDirectory(&config));
  ApplyScheduleDefaults(&config);
  return config;
}

absl::StatusOr<TrainerConfig> LoadConfig(const std::string& path,
                                         const std::vector<std::string>& overrides,
                                         int world_size) {
  ASSIGN_OR_RETURN(TrainerConfig config, LoadRecipe(path, overrides));
  RETURN_IF_ERROR(ValidateConfig(config, world_size));
  return config;
}

}  // namespace tetra
