#include "data/llmc_shard.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

class LlmcShardStream : public TokenStream {
 public:
  LlmcShardStream(MappedFile file, TokenType type, int64_t num_tokens)
      : file_(std::move(file)), type_(type), num_tokens_(num_tokens) {}
  int64_t size() const override { return num_tokens_; }
  const std::string& name() const override { return file_.path(); }
  TokenLocation Locate(int64_t position) const override { return {file_.path(), position}; }

 protected:
  absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const override {
    const int64_t token_bytes = TokenTypeSize(type_);
    return file_.ReadRange(
        kLlmcHeaderBytes + begin * token_bytes, count * token_bytes,
        [&](const uint8_t* tokens) { ConvertTokens(type_, tokens, count, out); });
  }

 private:
  MappedFile file_;
  TokenType type_;
  int64_t num_tokens_;
};

// For a file that is not an llm.c shard at all.
constexpr char kNotLlmcHint[] =
    "data.format LLMC expects llm.c shards (made by llm.c's dev/data scripts); for Megatron "
    ".bin/.idx use data.format MEGATRON";

}  // namespace

absl::StatusOr<std::unique_ptr<TokenStream>> OpenLlmcShard(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile file,
                   MappedFile::Open(path, "llm.c shard",
                                    "check data.path (or data.valid_path): it must name an llm.c "
                                    "shard or a glob of them, e.g. data/fineweb_train_*.bin"));
  if (file.size() < kLlmcHeaderBytes) {
    return UserError(absl::StrFormat("%s: not an llm.c token shard: the file has %d bytes, fewer "
                                     "than the %d-byte header",
                                     path, file.size(), kLlmcHeaderBytes),
                     kNotLlmcHint);
  }
  const int32_t magic = LoadScalar<int32_t>(file.data());
  const int32_t version = LoadScalar<int32_t>(file.data() + 4);
  const int32_t num_tokens = LoadScalar<int32_t>(file.data() + 8);
  TokenType type;
  int32_t expected_version;
  if (magic == kLlmcMagicUint16) {
    type = TokenType::kUint16;
    expected_version = kLlmcVersionUint16;
  } else if (magic == kLlmcMagicUint32) {
    type = TokenType::kUint32;
    expected_version = kLlmcVersionUint32;
  } else {
    return UserError(absl::StrFormat("%s: not an llm.c token shard: the header magic is %d, "
                                     "expected %d (uint16 tokens) or %d (uint32 tokens)",
                                     path, magic, kLlmcMagicUint16, kLlmcMagicUint32),
                     kNotLlmcHint);
  }
  if (version != expected_version) {
    return UserError(absl::StrFormat("%s: unsupported llm.c shard version %d for magic %d, "
                                     "expected version %d",
                                     path, version, magic, expected_version),
                     "re-create the shard with llm.c's current dev/data scripts");
  }
  const int64_t token_bytes = TokenTypeSize(type);
  const int64_t expected_size = kLlmcHeaderBytes + num_tokens * token_bytes;
  if (num_tokens < 0 || file.size() != expected_size) {
    return UserError(
        absl::StrFormat("%s: the header promises %d tokens of %d bytes (%d bytes with the "
                        "header) but the file has %d bytes, so the shard is truncated or corrupt",
                        path, num_tokens, token_bytes, expected_size, file.size()),
        "re-create or re-download the shard (an interrupted copy leaves it truncated)");
  }
  return std::make_unique<LlmcShardStream>(std::move(file), type, num_tokens);
}

absl::Status WriteLlmcShard(const std::string& path, const std::vector<int32_t>& tokens,
                            bool uint32_tokens) {
  const int64_t max_token =
      uint32_tokens ? std::numeric_limits<int32_t>::max() : std::numeric_limits<uint16_t>::max();
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return UserError(absl::StrFormat("%s: %d tokens do not fit one llm.c shard (at most 2^31 - 1)",
                                     path, tokens.size()),
                     "split the tokens over several shards and read them with a glob");
  }
  std::string bytes;
  bytes.reserve(kLlmcHeaderBytes + tokens.size() * (uint32_tokens ? 4 : 2));
  AppendScalar<int32_t>(&bytes, uint32_tokens ? kLlmcMagicUint32 : kLlmcMagicUint16);
  AppendScalar<int32_t>(&bytes, uint32_tokens ? kLlmcVersionUint32 : kLlmcVersionUint16);
  AppendScalar<int32_t>(&bytes, static_cast<int32_t>(tokens.size()));
  bytes.resize(kLlmcHeaderBytes, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > max_token) {
      return UserError(
          absl::StrFormat("%s: token %d at position %d does not fit a %s llm.c shard [0, %d]", path,
                          tokens[i], i, uint32_tokens ? "uint32" : "uint16", max_token),
          uint32_tokens ? "token ids are never negative; check the tokenizer's output"
                        : "write uint32 tokens (magic 20240801) for vocabularies above 65536");
    }
    if (uint32_tokens) {
      AppendScalar<uint32_t>(&bytes, tokens[i]);
    } else {
      AppendScalar<uint16_t>(&bytes, tokens[i]);
    }
  }
  return WriteFileBytes(path, bytes);
}

}  // namespace tetra
