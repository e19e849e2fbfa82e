#include "data/megatron_dataset.h"

#include <algorithm>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

constexpr absl::string_view kMagic("MMIDIDX\0\0", 9);
constexpr uint64_t kVersion = 1;
// magic, version, dtype code, sequence count, document count.
constexpr int64_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;
// For an index that Megatron-LM's tools would not have written.
constexpr char kRecreateHint[] =
    "re-create the data set with Megatron-LM's tools/preprocess_data.py (an interrupted copy "
    "leaves files truncated)";

struct TokenTypeInfo {
  TokenType type;
  int64_t min;
  int64_t max;
};

absl::StatusOr<TokenTypeInfo> TokenTypeOfCode(int code, const std::string& path) {
  switch (code) {
    case kMegatronUint8:
      return TokenTypeInfo{TokenType::kUint8, 0, 255};
    case kMegatronInt8:
      return TokenTypeInfo{TokenType::kInt8, -128, 127};
    case kMegatronInt16:
      return TokenTypeInfo{TokenType::kInt16, -32768, 32767};
    case kMegatronInt32:
    case kMegatronInt64:  // int32 is the widest the trainer reads
      return TokenTypeInfo{code == kMegatronInt32 ? TokenType::kInt32 : TokenType::kInt64,
                           std::numeric_limits<int32_t>::min(),
                           std::numeric_limits<int32_t>::max()};
    case kMegatronUint16:
      return TokenTypeInfo{TokenType::kUint16, 0, 65535};
    case kMegatronFloat64:
    case kMegatronFloat32:
      return UserError(
          absl::StrFormat("%s: dtype code %d is %s, not an integer token type; expected 1 "
                          "(uint8), 2 (int8), 3 (int16), 4 (int32), 5 (int64) or 8 (uint16)",
                          path, code, code == kMegatronFloat64 ? "float64" : "float32"),
          "token files hold token ids; re-create the data set from text with Megatron-LM's "
          "tools/preprocess_data.py");
    default:
      return UserError(absl::StrFormat("%s: unknown dtype code %d; expected 1 (uint8), 2 (int8), "
                                       "3 (int16), 4 (int32), 5 (int64) or 8 (uint16)",
                                       path, code),
                       kRecreateHint);
  }
}

// A stretch of consecutive stream tokens stored contiguously in the .bin file.
struct Run {
  int64_t byte_offset;
  int64_t start;  // stream position of its first token
};

class MegatronStream : public TokenStream {
 public:
  MegatronStream(std::string name, MappedFile data, TokenType type, std::vector<Run> runs,
                 int64_t num_tokens)
      : name_(std::move(name)),
        data_(std::move(data)),
        type_(type),
        runs_(std::move(runs)),
        num_tokens_(num_tokens) {}
  int64_t size() const override { return num_tokens_; }
  const std::string& name() const override { return name_; }
  TokenLocation Locate(int64_t position) const override {
    const Run& run = runs_[RunOf(position)];
    return {data_.path(), run.byte_offset / TokenTypeSize(type_) + position - run.start};
  }

 protected:
  absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const override {
    const int64_t token_bytes = TokenTypeSize(type_);
    for (size_t r = RunOf(begin); count > 0; ++r) {
      int64_t run_end = r + 1 < runs_.size() ? runs_[r + 1].start : num_tokens_;
      int64_t n = std::min(count, run_end - begin);
      RETURN_IF_ERROR(data_.ReadRange(
          runs_[r].byte_offset + (begin - runs_[r].start) * token_bytes, n * token_bytes,
          [&](const uint8_t* tokens) { ConvertTokens(type_, tokens, n, out); }));
      begin += n;
      out += n;
      count -= n;
    }
    return absl::OkStatus();
  }

 private:
  size_t RunOf(int64_t position) const {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), position,
                               [](int64_t p, const Run& run) { return p < run.start; });
    return static_cast<size_t>(it - runs_.begin()) - 1;
  }

  std::string name_;
  MappedFile data_;
  TokenType type_;
  std::vector<Run> runs_;  // sorted by start; one run when the file is contiguous
  int64_t num_tokens_;
};

absl::StatusOr<MappedFile> OpenPart(const std::string& prefix, const std::string& suffix) {
  return MappedFile::Open(
      prefix + suffix, suffix == ".idx" ? "Megatron index" : "Megatron data file",
      absl::StrCat("a Megatron data set is ", prefix, ".idx plus ", prefix,
                   ".bin; check data.path (or data.valid_path): it names the prefix, either "
                   "file, or a glob of prefixes"));
}

// What tetra reads of an index's header: the token type and the number of
// sequences.
struct IndexHeader {
  TokenTypeInfo info;
  uint64_t num_sequences;
};

// The header must be there, start with Megatron's magic and be of the
// version tetra reads.
absl::Status CheckIndexPreamble(const MappedFile& index) {
  const std::string& index_path = index.path();
  const uint8_t* bytes = index.data();
  if (index.size() < kIndexHeaderBytes) {
    return UserError(absl::StrFormat("%s: truncated Megatron index: %d bytes, fewer than the "
                                     "%d-byte header",
                                     index_path, index.size(), kIndexHeaderBytes),
                     kRecreateHint);
  }
  absl::string_view magic(reinterpret_cast<const char*>(bytes), kMagic.size());
  if (magic != kMagic) {
    return UserError(absl::StrFormat("%s: not a Megatron index: the file starts with \"%s\", "
                                     "expected \"%s\"",
                                     index_path, absl::CHexEscape(magic), absl::CHexEscape(kMagic)),
                     "data.format MEGATRON expects Megatron-LM indexed data sets (.bin + .idx, "
                     "made by tools/preprocess_data.py); for llm.c shards use data.format LLMC");
  }
  const uint64_t version = LoadScalar<uint64_t>(bytes + 9);
  if (version != kVersion) {
    return UserError(absl::StrFormat("%s: unsupported Megatron index version %d, expected %d",
                                     index_path, version, kVersion),
                     kRecreateHint);
  }
  return absl::OkStatus();
}

// The header, with its tables checked to fit in the index.
absl::StatusOr<IndexHeader> ReadIndexHeader(const MappedFile& index) {
  RETURN_IF_ERROR(CheckIndexPreamble(index));
  const std::string& index_path = index.path();
  const uint8_t* bytes = index.data();
  ASSIGN_OR_RETURN(TokenTypeInfo info, TokenTypeOfCode(bytes[17], index_path));
  const uint64_t num_sequences = LoadScalar<uint64_t>(bytes + 18);
  const uint64_t num_documents = LoadScalar<uint64_t>(bytes + 26);
  // Sizes in the header may be garbage: compare counts before multiplying.
  const uint64_t body = index.size() - kIndexHeaderBytes;
  if (num_sequences > body / 12 || num_documents > (body - num_sequences * 12) / 8) {
    return UserError(
        absl::StrFormat(
            "%s: truncated Megatron index: the header promises %d sequences and %d documents "
            "(%.0f bytes of tables) but only %d bytes follow the header",
            index_path, num_sequences, num_documents,
            static_cast<double>(num_sequences) * 12 + static_cast<double>(num_documents) * 8, body),
        kRecreateHint);
  }
  return IndexHeader{info, num_sequences};
}

// The sequences of the index's tables (their lengths, then their byte
// offsets in `data`), merged into runs where they lie back to back.
struct RunTable {
  std::vector<Run> runs;
  int64_t num_tokens = 0;
};

absl::StatusOr<RunTable> ReadRuns(const std::string& prefix, const MappedFile& index,
                                  const IndexHeader& header, const MappedFile& data) {
  const uint8_t* lengths = index.data() + kIndexHeaderBytes;
  const uint8_t* pointers = lengths + header.num_sequences * 4;
  const int64_t token_bytes = TokenTypeSize(header.info.type);
  std::vector<Run> runs;
  int64_t num_tokens = 0;
  for (uint64_t i = 0; i < header.num_sequences; ++i) {
    const int32_t length = LoadScalar<int32_t>(lengths + i * 4);
    const int64_t pointer = LoadScalar<int64_t>(pointers + i * 8);
    if (length < 0 || pointer < 0 || pointer > data.size() ||
        length * token_bytes > data.size() - pointer) {
      return UserError(
          absl::StrFormat("%s: sequence %d (byte offset %d, %d tokens of %d bytes) runs past the "
                          "end of the file (%d bytes)",
                          data.path(), i, pointer, length, token_bytes, data.size()),
          absl::StrFormat("%s.idx and %s.bin do not belong together or the .bin is truncated; %s",
                          prefix, prefix, kRecreateHint));
    }
    const bool continues_run =
        !runs.empty() &&
        runs.back().byte_offset + (num_tokens - runs.back().start) * token_bytes == pointer;
    if (length > 0 && !continues_run) runs.push_back({pointer, num_tokens});
    num_tokens += length;
  }
  return RunTable{std::move(runs), num_tokens};
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenStream>> OpenMegatronDataset(const std::string& prefix) {
  ASSIGN_OR_RETURN(MappedFile index, OpenPart(prefix, ".idx"));
  ASSIGN_OR_RETURN(MappedFile data, OpenPart(prefix, ".bin"));
  ASSIGN_OR_RETURN(const IndexHeader header, ReadIndexHeader(index));
  ASSIGN_OR_RETURN(RunTable table, ReadRuns(prefix, index, header, data));
  return std::make_unique<MegatronStream>(prefix, std::move(data), header.info.type,
                                          std::move(table.runs), table.num_tokens);
}

absl::Status WriteMegatronDataset(const std::string& prefix,
                                  const std::vector<std::vector<int32_t>>& sequences,
                                  int dtype_code) {
  ASSIGN_OR_RETURN(TokenTypeInfo info, TokenTypeOfCode(dtype_code, prefix + ".idx"));
  const int token_bytes = TokenTypeSize(info.type);
  std::string data;
  std::string index(kMagic);
  AppendScalar<uint64_t>(&index, kVersion);
  AppendScalar<uint8_t>(&index, static_cast<uint8_t>(dtype_code));
  AppendScalar<uint64_t>(&index, sequences.size());
  AppendScalar<uint64_t>(&index, sequences.size() + 1);
  for (const auto& sequence : sequences) AppendScalar<int32_t>(&index, sequence.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    AppendScalar<int64_t>(&index, data.size());
    for (int32_t token : sequences[i]) {
      if (token < info.min || token > info.max) {
        return UserError(
            absl::StrFormat("%s.bin: token %d of sequence %d does not fit dtype code %d [%d, %d]",
                            prefix, token, i, dtype_code, info.min, info.max),
            "choose a wider dtype code, e.g. 4 (int32)");
      }
      // Little-endian: the low bytes of the int64 are the narrower integer.
      AppendScalar<int64_t>(&data, token);
      data.resize(data.size() - (8 - token_bytes));
    }
  }
  for (size_t document = 0; document <= sequences.size(); ++document) {
    AppendScalar<int64_t>(&index, document);
  }
  RETURN_IF_ERROR(WriteFileBytes(prefix + ".bin", data));
  return WriteFileBytes(prefix + ".idx", index);
}

}  // namespace tetra
