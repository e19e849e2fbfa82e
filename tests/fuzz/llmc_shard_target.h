// The check of one llm.c shard fuzz input (the gtest campaign and
// tools/fuzz/llmc_shard_fuzzer.cc): OpenLlmcShard either fails with a short
// UserError or accepts a file whose header, read by hand, has a known magic
// with its version and a token count that exactly fills the file, and whose
// every token reads back as the file stores it.
#ifndef TETRA_TESTS_FUZZ_LLMC_SHARD_TARGET_H_
#define TETRA_TESTS_FUZZ_LLMC_SHARD_TARGET_H_

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/llmc_shard.h"
#include "tests/testing/fuzzing.h"

namespace tetra::testing {

inline std::string LlmcShardProblem(const std::string& bytes, const std::string& path) {
  if (!WriteWholeFile(path, bytes)) return "cannot write the scratch file " + path;
  absl::StatusOr<std::unique_ptr<TokenStream>> stream = OpenLlmcShard(path);
  if (!stream.ok()) return UserErrorProblem(stream.status(), {path});
  if (bytes.size() < 1024) return "accepted a file shorter than the header";
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  const bool wide = header[0] == 20240801 && header[1] == 7;
  if (!wide && !(header[0] == 20240520 && header[1] == 1)) return "accepted a bad magic or version";
  const int64_t width = wide ? 4 : 2;
  if (header[2] < 0 || 1024 + header[2] * width != static_cast<int64_t>(bytes.size())) {
    return "accepted a token count that does not fill the file";
  }
  if ((*stream)->size() != header[2]) return "the stream's size is not the header's count";
  std::vector<int32_t> tokens(header[2]);
  if (!(*stream)->Read(0, header[2], tokens.data()).ok()) {
    return "reading the accepted tokens failed";
  }
  for (int64_t i = 0; i < header[2]; ++i) {
    uint32_t stored = 0;
    std::memcpy(&stored, bytes.data() + 1024 + i * width, width);
    const int64_t want = std::min<int64_t>(stored, INT32_MAX);  // uint32 above int32 saturates
    if (tokens[i] != want) return "a token reads back as another value";
  }
  if ((*stream)->Read(header[2], 1, tokens.data()).ok()) return "read past the end succeeded";
  return "";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_LLMC_SHARD_TARGET_H_
