#include "train/config_loader.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
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

// "did you mean "x"?" for the closest field of `type`, or the list of its fields
// when none is close.
std::string NearestFieldHint(const Descriptor* type, const std::string& name) {
  const FieldDescriptor* best = nullptr;
  size_t best_distance = 0;
  for (int i = 0; i < type->field_count(); ++i) {
    size_t d = EditDistance(name, type->field(i)->name());
    if (best == nullptr || d < best_distance) {
      best = type->field(i);
      best_distance = d;
    }
  }
  if (best == nullptr || best_distance > std::max<size_t>(2, name.size() / 3)) {
    std::vector<std::string> names;
    for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
    return absl::StrCat("the fields of ", type->name(), " are ", absl::StrJoin(names, ", "));
  }
  return absl::StrCat("did you mean \"", best->name(), "\"?");
}

// Collects the first parse error and adds the nearest-name hint for unknown fields.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!first_.empty()) return;
    const std::string where = absl::StrCat(line + 1, ":", column + 1, ": ");
    first_ = where + message;
    // protobuf says: Message type "tetra.ModelConfig" has no field named "x".
    constexpr std::string_view kType = "Message type \"";
    constexpr std::string_view kField = "has no field named \"";
    size_t t = message.find(kType), f = message.find(kField);
    if (t == std::string::npos || f == std::string::npos) return;
    size_t t_end = message.find('"', t + kType.size());
    size_t f_end = message.find('"', f + kField.size());
    std::string type_name = message.substr(t + kType.size(), t_end - t - kType.size());
    std::string field = message.substr(f + kField.size(), f_end - f - kField.size());
    const Descriptor* type =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
    if (type != nullptr) {
      first_ = absl::StrCat(where, type->name(), " has no field \"", field, "\"\nhint: ",
                            NearestFieldHint(type, field));
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status SetScalar(Message* message, const FieldDescriptor* field, const std::string& value,
                       const std::string& path) {
  const Reflection* reflection = message->GetReflection();
  auto bad = [&](const std::string& expected) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", path, "=", value, ": \"", value,
                                                   "\" is not ", expected));
  };
  const std::string& text = value;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a 32-bit integer");
      reflection->SetInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a 64-bit integer");
      reflection->SetInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an unsigned 32-bit integer");
      reflection->SetUInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an unsigned 64-bit integer");
      reflection->SetUInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a number");
      reflection->SetDouble(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v)) return bad("a number");
      reflection->SetFloat(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return bad("true or false");
      reflection->SetBool(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(message, field, text);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* enum_value = field->enum_type()->FindValueByName(text);
      if (enum_value == nullptr) {
        std::vector<std::string> names;
        for (int i = 0; i < field->enum_type()->value_count(); ++i) {
          names.push_back(field->enum_type()->value(i)->name());
        }
        return bad(absl::StrCat("one of ", absl::StrJoin(names, ", ")));
      }
      reflection->SetEnum(message, field, enum_value);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return absl::InvalidArgumentError(absl::StrCat(
          "--set ", path, ": ", field->name(), " is a message, not a scalar; hint: name one of its fields, e.g. ",
          path, ".", field->message_type()->field(0)->name()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainerConfig> ParseConfigText(std::string_view text, const std::string& source) {
  TrainerConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", errors.first()));
  }
  return config;
}

absl::StatusOr<TrainerConfig> LoadConfigFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path,
                                            "; hint: pass --config with a path to a .textproto file, e.g. configs/tiny_dense.textproto"));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  return ParseConfigText(buffer.str(), path);
}

absl::Status ApplyOverride(std::string_view assignment, TrainerConfig* config) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", std::string(assignment),
                                                   ": expected path.to.field=value, e.g. --set train.steps=20"));
  }
  const std::string path(assignment.substr(0, eq));
  const std::string value(assignment.substr(eq + 1));
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  Message* message = config;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Descriptor* type = message->GetDescriptor();
    const FieldDescriptor* field = type->FindFieldByName(parts[i]);
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", path, ": ", type->name(),
                                                     " has no field \"", parts[i], "\"\nhint: ",
                                                     NearestFieldHint(type, parts[i])));
    }
    if (field->is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", path, ": ", parts[i],
                                                     " is a repeated field; hint: set it in the config file"));
    }
    bool last = i + 1 == parts.size();
    if (!last) {
      if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        return absl::InvalidArgumentError(
            absl::StrCat("--set ", path, ": ", parts[i], " is a scalar and has no fields"));
      }
      message = message->GetReflection()->MutableMessage(message, field);
      continue;
    }
    return SetScalar(message, field, value, path);
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainerConfig> LoadConfig(const std::string& path,
                                         const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(TrainerConfig config, LoadConfigFile(path));
  for (const std::string& assignment : overrides) RETURN_IF_ERROR(ApplyOverride(assignment, &config));
  RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

}  // namespace tetra
