// TokenStream: a read-only sequence of token ids, the one thing a data set is
// to the trainer (docs/architecture.md "Numerics of one step": sample i is tokens
// [i*T, i*T + T] of the stream). File-backed streams memory-map their files,
// so a multi-GB data set costs no memory until it is read; a glob of shards is
// one stream in name order (ConcatStream). Also here: the element types token
// files store, and OpenTokenFiles, which turns `data.format` + `data.path` into
// a stream. Token ids are range-checked where samples are loaded (SampleLoader),
// so opening a data set reads nothing but its headers.
#ifndef TETRA_DATA_TOKEN_STREAM_H_
#define TETRA_DATA_TOKEN_STREAM_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/mapped_file.h"
#include "proto/config.pb.h"

namespace tetra {

// Where a token of a stream lives, for error messages.
struct TokenLocation {
  std::string file;
  int64_t position = 0;  // index of the token among that file's tokens
};

class TokenStream {
 public:
  virtual ~TokenStream() = default;

  virtual int64_t size() const = 0;
  // The file, glob or source the stream was opened from.
  virtual const std::string& name() const = 0;
  // Tokens [begin, begin + count) as int32 into out[0..count); an error if the
  // range is not inside [0, size()).
  absl::Status Read(int64_t begin, int64_t count, int32_t* out) const;
  // The file and in-file index of token `position`, 0 <= position < size().
  virtual TokenLocation Locate(int64_t position) const = 0;

 protected:
  // Read with the range already checked; an error only for a file that
  // changed under the stream (MappedFile::ReadRange).
  virtual absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const = 0;
};

// An in-memory stream (tests, generated data).
class VectorTokenStream : public TokenStream {
 public:
  VectorTokenStream(std::string name, std::vector<int32_t> tokens)
      : name_(std::move(name)), tokens_(std::move(tokens)) {}
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  const std::string& name() const override { return name_; }
  TokenLocation Locate(int64_t position) const override { return {name_, position}; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 protected:
  absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const override;

 private:
  std::string name_;
  std::vector<int32_t> tokens_;
};

// Several streams read back to back as one, e.g. the shards of a glob.
class ConcatStream : public TokenStream {
 public:
  ConcatStream(std::string name, std::vector<std::unique_ptr<TokenStream>> parts);
  int64_t size() const override { return starts_.back(); }
  const std::string& name() const override { return name_; }
  TokenLocation Locate(int64_t position) const override;

 protected:
  absl::Status ReadInRange(int64_t begin, int64_t count, int32_t* out) const override;

 private:
  // The part holding stream position `position`.
  size_t PartOf(int64_t position) const;

  std::string name_;
  std::vector<std::unique_ptr<TokenStream>> parts_;
  std::vector<int64_t> starts_;  // parts_.size() + 1 prefix sums of part sizes
};

// Integer element types token files store (little-endian).
enum class TokenType { kUint8, kInt8, kInt16, kUint16, kInt32, kUint32, kInt64 };
int TokenTypeSize(TokenType type);
// Converts `count` tokens stored at `src` (any alignment) to int32; values
// beyond the int32 range saturate, so they still fail the vocabulary check.
void ConvertTokens(TokenType type, const uint8_t* src, int64_t count, int32_t* out);

// Little-endian scalars in file headers (the host is little-endian; memcpy
// because header fields need not be aligned).
template <typename T>
T LoadScalar(const uint8_t* src) {
  T value;
  std::memcpy(&value, src, sizeof(T));
  return value;
}
template <typename T>
void AppendScalar(std::string* bytes, T value) {
  bytes->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Writes `bytes` as the whole content of `path` (the token file writers).
absl::Status WriteFileBytes(const std::string& path, const std::string& bytes);

// `path_or_glob` of format LLMC: an llm.c shard or a glob of them; MEGATRON: a
// data set prefix (`.bin`/`.idx` suffixes are accepted) or a glob of prefixes
// (a weighted blend is several of these: training_data.cc opens each).
// Matches are read in name order. SYNTHETIC has no files and is an error here.
absl::StatusOr<std::unique_ptr<TokenStream>> OpenTokenFiles(DataConfig::Format format,
                                                            const std::string& path_or_glob);

}  // namespace tetra

#endif  // TETRA_DATA_TOKEN_STREAM_H_
