// Flag parsing shared by the subcommands: `--name value` or `--name=value`,
// repeatable `--set path=value`, and an error for anything unknown.
#ifndef TETRA_TOOLS_COMMAND_LINE_H_
#define TETRA_TOOLS_COMMAND_LINE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tetra {

struct ParsedFlags {
  std::map<std::string, std::string> values;  // last value of each flag
  std::vector<std::string> sets;              // every --set, in order
};

// Parses argv[first..argc) for `command`; `allowed` names the flags it takes
// (without dashes; "set" enables --set).
absl::StatusOr<ParsedFlags> ParseFlags(int argc, char** argv, int first, const std::string& command,
                                       const std::set<std::string>& allowed);

// The weights' dtype of an export, from `--dtype f32|bf16` (f32 when absent).
absl::StatusOr<DType> ExportDTypeFlag(const ParsedFlags& flags);

}  // namespace tetra

#endif  // TETRA_TOOLS_COMMAND_LINE_H_
