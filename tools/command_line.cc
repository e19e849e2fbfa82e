#include "tools/command_line.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tetra {

absl::StatusOr<ParsedFlags> ParseFlags(int argc, char** argv, int first, const std::string& command,
                                       const std::set<std::string>& allowed) {
  ParsedFlags flags;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("tetra ", command, ": unexpected argument \"", arg,
                                                     "\"\nhint: flags are --name value"));
    }
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tetra ", command, ": flag --", name,
                                                     " needs a value"));
    }
    if (!allowed.count(name)) {
      std::vector<std::string> names;
      for (const std::string& a : allowed) names.push_back("--" + a);
      return absl::InvalidArgumentError(absl::StrCat("tetra ", command, ": unknown flag --", name,
                                                     "\nhint: it takes ", absl::StrJoin(names, ", ")));
    }
    if (name == "set") {
      flags.sets.push_back(value);
    } else {
      flags.values[name] = value;
    }
  }
  return flags;
}

}  // namespace tetra
