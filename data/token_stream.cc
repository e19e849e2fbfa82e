#include "data/token_stream.h"

#include <glob.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "data/llmc_shard.h"
#include "data/megatron_dataset.h"

namespace tetra {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and are read in place");

absl::Status TokenStream::Read(int64_t begin, int64_t count, int32_t* out) const {
  if (begin < 0 || count < 0 || begin > size() - count) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s: cannot read tokens [%d, %d): the stream holds %d tokens", name(),
                        begin, begin + count, size()));
  }
  if (count == 0) return absl::OkStatus();
  return ReadInRange(begin, count, out);
}

absl::Status VectorTokenStream::ReadInRange(int64_t begin, int64_t count, int32_t* out) const {
  std::copy_n(tokens_.begin() + begin, count, out);
  return absl::OkStatus();
}

ConcatStream::ConcatStream(std::string name, std::vector<std::unique_ptr<TokenStream>> parts)
    : name_(std::move(name)), parts_(std::move(parts)) {
  starts_.push_back(0);
  for (const auto& part : parts_) starts_.push_back(starts_.back() + part->size());
}

size_t ConcatStream::PartOf(int64_t position) const {
  // The last part whose start is <= position (empty parts are skipped over).
  auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, position);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

TokenLocation ConcatStream::Locate(int64_t position) const {
  size_t part = PartOf(position);
  return parts_[part]->Locate(position - starts_[part]);
}

absl::Status ConcatStream::ReadInRange(int64_t begin, int64_t count, int32_t* out) const {
  for (size_t part = PartOf(begin); count > 0; ++part) {
    int64_t local = begin - starts_[part];
    int64_t n = std::min(count, parts_[part]->size() - local);
    RETURN_IF_ERROR(parts_[part]->Read(local, n, out));
    begin += n;
    out += n;
    count -= n;
  }
  return absl::OkStatus();
}

int TokenTypeSize(TokenType type) {
  switch (type) {
    case TokenType::kUint8:
    case TokenType::kInt8:
      return 1;
    case TokenType::kInt16:
    case TokenType::kUint16:
      return 2;
    case TokenType::kInt32:
    case TokenType::kUint32:
      return 4;
    case TokenType::kInt64:
      return 8;
  }
  TETRA_CHECK(false) << "unknown token type";
  return 0;
}

namespace {

template <typename T>
void ConvertFrom(const uint8_t* src, int64_t count, int32_t* out) {
  constexpr auto kMin = std::numeric_limits<int32_t>::min();
  constexpr auto kMax = std::numeric_limits<int32_t>::max();
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, src + i * sizeof(T), sizeof(T));
    if constexpr (sizeof(T) < sizeof(int32_t) || std::is_same_v<T, int32_t>) {
      out[i] = value;
    } else {
      out[i] = static_cast<int32_t>(std::clamp<int64_t>(value, kMin, kMax));
    }
  }
}

bool HasGlobCharacters(const std::string& pattern) {
  return pattern.find_first_of("*?[") != std::string::npos;
}

// The paths `pattern` matches, sorted by name; an error if there are none.
absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern, const std::string& what) {
  glob_t matches;
  int rc = glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  globfree(&matches);
  if (paths.empty()) {
    return UserError(absl::StrCat("no ", what, " match the pattern '", pattern, "'"),
                     "check data.path (or data.valid_path): the glob must match at least one "
                     "file, e.g. data/fineweb_train_*.bin",
                     absl::StatusCode::kNotFound);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string StripSuffix(const std::string& path, const std::string& suffix) {
  if (path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return path.substr(0, path.size() - suffix.size());
  }
  return path;
}

}  // namespace

void ConvertTokens(TokenType type, const uint8_t* src, int64_t count, int32_t* out) {
  switch (type) {
    case TokenType::kUint8:
      return ConvertFrom<uint8_t>(src, count, out);
    case TokenType::kInt8:
      return ConvertFrom<int8_t>(src, count, out);
    case TokenType::kInt16:
      return ConvertFrom<int16_t>(src, count, out);
    case TokenType::kUint16:
      return ConvertFrom<uint16_t>(src, count, out);
    case TokenType::kInt32:
      return ConvertFrom<int32_t>(src, count, out);
    case TokenType::kUint32:
      return ConvertFrom<uint32_t>(src, count, out);
    case TokenType::kInt64:
      return ConvertFrom<int64_t>(src, count, out);
  }
}

absl::Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return UserError(absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)),
                     "check that its directory exists and is writable",
                     absl::StatusCode::kPermissionDenied);
  }
  bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  if (std::fclose(file) != 0 || !written) {
    return UserError(absl::StrFormat("%s: writing %d bytes failed: %s", path, bytes.size(),
                                     std::strerror(errno)),
                     "check that the disk is not full", absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenStream>> OpenTokenFiles(DataConfig::Format format,
                                                            const std::string& path_or_glob) {
  if (format == DataConfig::SYNTHETIC) {
    return UserError("data.format SYNTHETIC generates its tokens and opens no files",
                     "set data.format to LLMC or MEGATRON to read data.path");
  }
  if (path_or_glob.empty()) {
    return UserError("data.path is empty",
                     "set data.path to a token file or a glob of shards, e.g. "
                     "data/fineweb_train_*.bin");
  }
  std::vector<std::unique_ptr<TokenStream>> parts;
  if (format == DataConfig::LLMC) {
    std::vector<std::string> paths = {path_or_glob};
    if (HasGlobCharacters(path_or_glob)) {
      ASSIGN_OR_RETURN(paths, Glob(path_or_glob, "llm.c shards"));
    }
    for (const auto& path : paths) {
      ASSIGN_OR_RETURN(auto part, OpenLlmcShard(path));
      parts.push_back(std::move(part));
    }
  } else if (format == DataConfig::MEGATRON) {
    std::string prefix_pattern = StripSuffix(StripSuffix(path_or_glob, ".bin"), ".idx");
    std::vector<std::string> prefixes = {prefix_pattern};
    if (HasGlobCharacters(prefix_pattern)) {
      ASSIGN_OR_RETURN(auto index_files,
                       Glob(prefix_pattern + ".idx", "Megatron index (.idx) files"));
      prefixes.clear();
      for (const auto& index_file : index_files)
        prefixes.push_back(StripSuffix(index_file, ".idx"));
    }
    for (const auto& prefix : prefixes) {
      ASSIGN_OR_RETURN(auto part, OpenMegatronDataset(prefix));
      parts.push_back(std::move(part));
    }
  } else {
    return UserError(absl::StrCat("data.format ", static_cast<int>(format), " is unknown"),
                     "set data.format to SYNTHETIC, LLMC or MEGATRON");
  }
  if (parts.size() == 1) return std::move(parts[0]);
  return std::make_unique<ConcatStream>(path_or_glob, std::move(parts));
}

}  // namespace tetra
