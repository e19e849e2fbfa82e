#include "tools/command_line.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/user_error.h"

namespace tetra {

absl::StatusOr<ParsedFlags> ParseFlags(int argc, char** argv, int first, const std::string& command,
                                       const std::set<std::string>& allowed) {
  ParsedFlags flags;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) {
      return UserError(absl::StrCat("tetra ", command, ": unexpected argument \"", arg, "\""),
                       "flags are --name value or --name=value");
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!allowed.count(name)) {
      std::vector<std::string> names;
      for (const std::string& a : allowed) names.push_back("--" + a);
      return UserError(absl::StrCat("tetra ", command, ": unknown flag --", name),
                       absl::StrCat("tetra ", command, " takes ", absl::StrJoin(names, ", ")));
    }
    if (eq == std::string::npos) {
      if (i + 1 == argc) {
        return UserError(absl::StrCat("tetra ", command, ": flag --", name, " needs a value"),
                         absl::StrCat("write --", name, " VALUE or --", name, "=VALUE",
                                      name == "set" ? ", e.g. --set train.steps=20" : ""));
      }
      value = argv[++i];
    }
    if (name == "set") {
      flags.sets.push_back(value);
    } else {
      flags.values[name] = value;
    }
  }
  return flags;
}

absl::StatusOr<DType> ExportDTypeFlag(const ParsedFlags& flags) {
  const std::string name = flags.values.count("dtype") ? flags.values.at("dtype") : "f32";
  if (name != "f32" && name != "bf16") {
    return UserError(absl::StrCat("--dtype ", name, " is not f32 or bf16"),
                     "export fp32 weights with --dtype f32 or halve the size with --dtype bf16");
  }
  return name == "bf16" ? DType::kBF16 : DType::kF32;
}

}  // namespace tetra
