// llm.c token shards (karpathy/llm.c, dev/data/data_common.py): a 1024-byte
// header of 256 little-endian int32 (magic, version, token count, zeros), then
// the tokens: uint16 for GPT-2 shards (magic 20240520, version 1) and uint32
// for Llama-3 shards (magic 20240801, version 7). A shard opens as a memory-
// mapped TokenStream; the writer makes shards for tests and data preparation.
#ifndef TETRA_DATA_LLMC_SHARD_H_
#define TETRA_DATA_LLMC_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/token_stream.h"

namespace tetra {

inline constexpr int64_t kLlmcHeaderBytes = 1024;
inline constexpr int32_t kLlmcMagicUint16 = 20240520;
inline constexpr int32_t kLlmcVersionUint16 = 1;
inline constexpr int32_t kLlmcMagicUint32 = 20240801;
inline constexpr int32_t kLlmcVersionUint32 = 7;

// Opens and checks one shard: header present, known magic, llm.c's version for
// that magic, and a file size of exactly header + tokens.
absl::StatusOr<std::unique_ptr<TokenStream>> OpenLlmcShard(const std::string& path);

// Writes `tokens` as a shard, uint16 (GPT-2 layout) unless `uint32_tokens`;
// a token that does not fit the element type is an error.
absl::Status WriteLlmcShard(const std::string& path, const std::vector<int32_t>& tokens,
                            bool uint32_tokens = false);

}  // namespace tetra

#endif  // TETRA_DATA_LLMC_SHARD_H_
