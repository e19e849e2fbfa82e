#include "launch/rank_errors.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "comm/launcher.h"

namespace tetra {
namespace {

constexpr char kPrefix[] = "error-rank-";

std::optional<int> RankOfFileName(absl::string_view name) {
  int rank = 0;
  if (!absl::ConsumePrefix(&name, kPrefix) || !absl::SimpleAtoi(name, &rank)) return std::nullopt;
  return rank;
}

}  // namespace

void RecordRankError(const absl::Status& error) {
  const char* dir = std::getenv(kLaunchDirVariable);
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream(absl::StrCat(dir, "/", kPrefix, LaunchedRank())) << error.message() << "\n";
}

std::vector<std::string> ReadRankErrors(const std::string& dir) {
  std::vector<std::pair<int, std::string>> errors;
  std::error_code ignored;  // a missing directory holds no errors
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
    const std::optional<int> rank = RankOfFileName(entry.path().filename().string());
    if (!rank) continue;
    std::stringstream text;
    text << std::ifstream(entry.path()).rdbuf();
    errors.emplace_back(*rank, std::string(absl::StripTrailingAsciiWhitespace(text.str())));
  }
  std::sort(errors.begin(), errors.end());
  std::vector<std::string> out;
  for (const auto& [rank, message] : errors)
    out.push_back(absl::StrCat("rank ", rank, ": ", message));
  return out;
}

}  // namespace tetra
