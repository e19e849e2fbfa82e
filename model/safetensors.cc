#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is read in place");

constexpr size_t kLengthFieldBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";
// A valid header nests three levels deep; the cap only stops runaway recursion.
constexpr int kMaxJsonDepth = 16;

// ---------------------------------------------------------------------------
// A strict JSON parser for the subset a safetensors header uses: objects,
// arrays, strings (all escapes, UTF-8 checked) and integers.

struct JsonValue {
  enum class Kind { kObject, kArray, kString, kInteger };
  Kind kind = Kind::kInteger;
  std::string string;             // kString
  int64_t integer = 0;            // kInteger
  std::vector<std::string> keys;  // kObject: member names, values in `items`
  std::vector<JsonValue> items;   // kArray elements or kObject member values
};

const char* KindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kObject: return "an object";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kInteger: return "an integer";
  }
  return "?";
}

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  // Parses `text` as exactly one value surrounded by optional whitespace. On
  // failure error_offset() and error() say where and what.
  bool ParseDocument(JsonValue* out) {
    SkipWhitespace();
    if (!ParseValue(out, 0)) return false;
    SkipWhitespace();
    if (pos_ != text_.size()) return Fail("unexpected characters after the top-level object");
    return true;
  }

  size_t error_offset() const { return pos_; }
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  unsigned char Peek() const { return static_cast<unsigned char>(text_[pos_]); }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  bool Expect(char c, const char* context) {
    SkipWhitespace();
    if (AtEnd()) return Fail(absl::StrFormat("header ends where '%c' %s was expected", c, context));
    if (Peek() != c) {
      return Fail(absl::StrFormat("expected '%c' %s, found %s", c, context, Describe(Peek())));
    }
    ++pos_;
    return true;
  }

  static std::string Describe(unsigned char c) {
    if (c >= 0x20 && c < 0x7f) return absl::StrFormat("'%c'", c);
    return absl::StrFormat("byte 0x%02x", c);
  }

  bool ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxJsonDepth) return Fail("JSON nested too deeply for a safetensors header");
    SkipWhitespace();
    if (AtEnd()) return Fail("header ends where a value was expected");
    unsigned char c = Peek();
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return ParseString(&out->string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseInteger(out);
    return Fail(absl::StrCat("expected an object, array, string or integer, found ", Describe(c)));
  }

  bool ParseObject(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipWhitespace();
      if (AtEnd()) return Fail("header ends inside an object");
      if (Peek() != '"')
        return Fail(absl::StrCat("expected a string key, found ", Describe(Peek())));
      std::string key;
      if (!ParseString(&key)) return false;
      if (!Expect(':', "after an object key")) return false;
      out->keys.push_back(std::move(key));
      out->items.emplace_back();
      if (!ParseValue(&out->items.back(), depth + 1)) return false;
      SkipWhitespace();
      if (AtEnd()) return Fail("header ends inside an object");
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      if (Peek() != ',') {
        return Fail(
            absl::StrCat("expected ',' or '}' after an object member, found ", Describe(Peek())));
      }
      ++pos_;
    }
  }

  bool ParseArray(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      out->items.emplace_back();
      if (!ParseValue(&out->items.back(), depth + 1)) return false;
      SkipWhitespace();
      if (AtEnd()) return Fail("header ends inside an array");
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      if (Peek() != ',') {
        return Fail(
            absl::StrCat("expected ',' or ']' after an array element, found ", Describe(Peek())));
      }
      ++pos_;
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Fail("header ends inside a \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      unsigned char c = Peek();
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return Fail(absl::StrCat("expected a hex digit in a \\u escape, found ", Describe(c)));
      }
      ++pos_;
    }
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool ParseEscape(std::string* out) {
    static constexpr std::string_view kEscaped = "\"\\/bfnrt";
    static constexpr std::string_view kDecoded = "\"\\/\b\f\n\r\t";
    if (AtEnd()) return Fail("header ends inside a string escape");
    unsigned char c = Peek();
    if (size_t i = kEscaped.find(static_cast<char>(c)); i != std::string_view::npos) {
      out->push_back(kDecoded[i]);
      ++pos_;
      return true;
    }
    if (c != 'u') return Fail(absl::StrCat("invalid escape \\", Describe(c), " in a string"));
    ++pos_;
    uint32_t cp;
    if (!ParseHex4(&cp)) return false;
    if (cp >= 0xdc00 && cp <= 0xdfff) return Fail("unpaired low surrogate in a \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (text_.substr(pos_, 2) != "\\u") return Fail("high surrogate not followed by \\u");
      pos_ += 2;
      uint32_t low;
      if (!ParseHex4(&low)) return false;
      if (low < 0xdc00 || low > 0xdfff) return Fail("high surrogate not followed by a low one");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    AppendUtf8(cp, out);
    return true;
  }

  // Copies one well-formed UTF-8 sequence (RFC 3629: no overlongs, no
  // surrogates, at most U+10FFFF) starting with the lead byte at pos_.
  bool CopyUtf8Sequence(std::string* out) {
    unsigned char lead = Peek();
    int continuation;
    unsigned char second_min = 0x80, second_max = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      continuation = 1;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      continuation = 2;
      if (lead == 0xe0) second_min = 0xa0;
      if (lead == 0xed) second_max = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      continuation = 3;
      if (lead == 0xf0) second_min = 0x90;
      if (lead == 0xf4) second_max = 0x8f;
    } else {
      return Fail(absl::StrFormat("invalid UTF-8 lead byte 0x%02x in a string", lead));
    }
    if (text_.size() - pos_ <= static_cast<size_t>(continuation)) {
      return Fail("header ends inside a UTF-8 sequence");
    }
    for (int i = 1; i <= continuation; ++i) {
      auto c = static_cast<unsigned char>(text_[pos_ + i]);
      unsigned char lo = i == 1 ? second_min : 0x80, hi = i == 1 ? second_max : 0xbf;
      if (c < lo || c > hi) {
        pos_ += i;
        return Fail(absl::StrFormat("invalid UTF-8 continuation byte 0x%02x in a string", c));
      }
    }
    out->append(text_.substr(pos_, continuation + 1));
    pos_ += continuation + 1;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (AtEnd()) return Fail("header ends inside a string");
      unsigned char c = Peek();
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail(absl::StrFormat("unescaped control byte 0x%02x in a string", c));
      if (c == '\\') {
        ++pos_;
        if (!ParseEscape(out)) return false;
      } else if (c >= 0x80) {
        if (!CopyUtf8Sequence(out)) return false;
      } else {
        out->push_back(static_cast<char>(c));
        ++pos_;
      }
    }
  }

  bool ParseInteger(JsonValue* out) {
    out->kind = JsonValue::Kind::kInteger;
    bool negative = Peek() == '-';
    if (negative) ++pos_;
    if (AtEnd() || Peek() < '0' || Peek() > '9') return Fail("expected a digit after '-'");
    if (Peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9') {
      return Fail("leading zeros are not allowed in JSON integers");
    }
    uint64_t magnitude = 0;
    constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      uint64_t digit = Peek() - '0';
      if (magnitude > (kMax - digit) / 10) return Fail("integer does not fit in 64 bits");
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (!AtEnd() && (Peek() == '.' || Peek() == 'e' || Peek() == 'E')) {
      return Fail("a safetensors header holds only integers, found a fraction or exponent");
    }
    out->integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// ---------------------------------------------------------------------------
// Header semantics.

// For a file whose header is not what a safetensors writer makes.
constexpr char kNotSafetensorsHint[] =
    "init_from must be a .safetensors file, e.g. model.safetensors from a Hugging Face "
    "checkpoint or `tetra export`";

absl::Status FileError(const std::string& path, const std::string& message,
                       const std::string& hint = kNotSafetensorsHint) {
  return UserError(absl::StrCat("safetensors file ", path, ": ", message), hint);
}

// "<what>: <strerror>" with the status code errno maps to.
absl::Status ErrnoError(int error, const std::string& what, const std::string& hint) {
  absl::Status status = absl::ErrnoToStatus(error, what);
  return UserError(std::string(status.message()), hint, status.code());
}

struct FormatDType {
  const char* name;
  std::optional<DType> dtype;  // nullopt: tetra does not read it
  int bits;                    // per element
};

// Every dtype the safetensors format defines (safetensors/src/tensor.rs).
constexpr FormatDType kFormatDTypes[] = {
    {"F32", DType::kF32, 32},    {"BF16", DType::kBF16, 16},     {"F16", DType::kF16, 16},
    {"I32", DType::kI32, 32},    {"F64", std::nullopt, 64},      {"I64", std::nullopt, 64},
    {"U64", std::nullopt, 64},   {"U32", std::nullopt, 32},      {"I16", std::nullopt, 16},
    {"U16", std::nullopt, 16},   {"I8", std::nullopt, 8},        {"U8", std::nullopt, 8},
    {"BOOL", std::nullopt, 8},   {"F8_E4M3", std::nullopt, 8},   {"F8_E5M2", std::nullopt, 8},
    {"F8_E8M0", std::nullopt, 8}, {"C64", std::nullopt, 64},     {"F6_E2M3", std::nullopt, 6},
    {"F6_E3M2", std::nullopt, 6}, {"F4", std::nullopt, 4},
};
absl::StatusOr<FormatDType> ParseDType(const std::string& name) {
  for (const FormatDType& d : kFormatDTypes) {
    if (d.name == name) return d;
  }
  std::vector<const char*> names;
  for (const FormatDType& d : kFormatDTypes) names.push_back(d.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name,
                                                 "\" (the format's dtypes are ",
                                                 absl::StrJoin(names, ", "), ")"));
}

// Finds member `key` of `object`; nullptr when absent.
const JsonValue* Member(const JsonValue& object, std::string_view key) {
  for (size_t i = 0; i < object.keys.size(); ++i) {
    if (object.keys[i] == key) return &object.items[i];
  }
  return nullptr;
}

absl::Status ParseMetadata(const JsonValue& value, std::map<std::string, std::string>* out) {
  if (value.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError("\"__metadata__\" must be an object of strings");
  }
  for (size_t i = 0; i < value.keys.size(); ++i) {
    if (value.items[i].kind != JsonValue::Kind::kString) {
      return absl::InvalidArgumentError(absl::StrCat("\"__metadata__\" entry \"", value.keys[i],
                                                     "\" is ", KindName(value.items[i].kind),
                                                     ", expected a string"));
    }
    (*out)[value.keys[i]] = value.items[i].string;
  }
  return absl::OkStatus();
}

struct TensorInfo {
  SafetensorsEntry entry;
  uint64_t begin;  // first byte in the data buffer
};

// Validates one tensor's {"dtype", "shape", "data_offsets"} against a data
// buffer of `data_size` bytes. Errors name the tensor but not the file.
absl::StatusOr<TensorInfo> ParseTensorInfo(const std::string& name, const JsonValue& value,
                                           uint64_t data_size) {
  const std::string what = absl::StrCat("tensor \"", name, "\"");
  auto error = [&what](const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", problem));
  };
  if (value.kind != JsonValue::Kind::kObject) {
    return error(absl::StrCat("is described by ", KindName(value.kind),
                              ", expected an object with dtype, shape and data_offsets"));
  }
  for (const std::string& key : value.keys) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return error(
          absl::StrCat("has unexpected key \"", key, "\" (expected dtype, shape, data_offsets)"));
    }
  }
  const JsonValue* dtype = Member(value, "dtype");
  const JsonValue* shape = Member(value, "shape");
  const JsonValue* offsets = Member(value, "data_offsets");
  if (value.keys.size() != 3 || dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return error("needs exactly one each of dtype, shape and data_offsets");
  }

  if (dtype->kind != JsonValue::Kind::kString) return error("has a dtype that is not a string");
  absl::StatusOr<FormatDType> parsed_dtype = ParseDType(dtype->string);
  if (!parsed_dtype.ok()) return error(absl::StrCat("has ", parsed_dtype.status().message()));
  TensorInfo info{{name, parsed_dtype->dtype, dtype->string, {}}, 0};

  if (shape->kind != JsonValue::Kind::kArray) return error("has a shape that is not an array");
  int64_t numel = 1;
  for (const JsonValue& dim : shape->items) {
    if (dim.kind != JsonValue::Kind::kInteger || dim.integer < 0) {
      return error("has a shape entry that is not a non-negative integer");
    }
    if (__builtin_mul_overflow(numel, dim.integer, &numel)) {
      return error("has a shape too large to address");
    }
    info.entry.shape.push_back(dim.integer);
  }
  int64_t nbits;
  if (__builtin_mul_overflow(numel, int64_t{parsed_dtype->bits}, &nbits)) {
    return error("has a shape too large to address");
  }
  if (nbits % 8 != 0) {
    return error(absl::StrFormat("has shape %s of %s, %d bits, which is not whole bytes",
                                 ShapeString(info.entry.shape), dtype->string, nbits));
  }
  const int64_t nbytes = nbits / 8;

  if (offsets->kind != JsonValue::Kind::kArray || offsets->items.size() != 2 ||
      offsets->items[0].kind != JsonValue::Kind::kInteger ||
      offsets->items[1].kind != JsonValue::Kind::kInteger) {
    return error("has data_offsets that are not two integers [begin, end]");
  }
  const int64_t begin = offsets->items[0].integer, end = offsets->items[1].integer;
  const std::string offsets_string = absl::StrFormat("[%d, %d]", begin, end);
  if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_size) {
    return error(absl::StrFormat(
        "has data_offsets %s outside the %d-byte data buffer (need 0 <= begin <= end <= %d)",
        offsets_string, data_size, data_size));
  }
  if (end - begin != nbytes) {
    return error(
        absl::StrFormat("has data_offsets %s spanning %d bytes, but shape %s of %s "
                        "needs %d bytes",
                        offsets_string, end - begin, ShapeString(info.entry.shape),
                        dtype->string, nbytes));
  }
  info.begin = static_cast<uint64_t>(begin);
  return info;
}

}  // namespace

void SafetensorsFile::Unmap::operator()(const char* addr) const {
  munmap(const_cast<char*>(addr), size);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  constexpr char kPathHint[] = "check init_from: it must name an existing .safetensors file";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open safetensors file " + path, kPathHint);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "cannot stat safetensors file " + path, kPathHint);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return FileError(path, "not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kLengthFieldBytes) {
    close(fd);
    return FileError(path, absl::StrFormat("the file is %d bytes, shorter than the 8-byte header "
                                           "length that starts every safetensors file",
                                           file_size));
  }
  void* addr = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int mmap_errno = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    return ErrnoError(mmap_errno, "cannot map safetensors file " + path,
                      "the address space may be limited; check `ulimit -v`");
  }

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::unique_ptr<const char, Unmap>(static_cast<const char*>(addr),
                                                     Unmap{static_cast<size_t>(file_size)});
  const char* bytes = file.mapping_.get();
  uint64_t header_size;
  std::memcpy(&header_size, bytes, kLengthFieldBytes);
  const uint64_t after_length = file_size - kLengthFieldBytes;
  if (header_size > after_length) {
    return FileError(path,
                     absl::StrFormat("the header length field says %d bytes of JSON but only "
                                     "%d bytes follow it (truncated or not safetensors?)",
                                     header_size, after_length),
                     absl::StrCat("a truncated file comes from an interrupted download or copy; ",
                                  kNotSafetensorsHint));
  }
  const uint64_t data_size = after_length - header_size;
  file.data_ = bytes + kLengthFieldBytes + header_size;

  JsonValue root;
  JsonParser parser(std::string_view(bytes + kLengthFieldBytes, header_size));
  if (!parser.ParseDocument(&root)) {
    return FileError(
        path, absl::StrFormat("malformed JSON header at byte %d of the header "
                              "(file offset %d): %s",
                              parser.error_offset(), parser.error_offset() + kLengthFieldBytes,
                              parser.error()));
  }
  if (root.kind != JsonValue::Kind::kObject) {
    return FileError(path, absl::StrCat("the header is ", KindName(root.kind),
                                        ", expected a JSON object of tensors"));
  }
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& name = root.keys[i];
    if (name == kMetadataKey) {
      absl::Status status = ParseMetadata(root.items[i], &file.metadata_);
      if (!status.ok()) return FileError(path, std::string(status.message()));
      continue;
    }
    absl::StatusOr<TensorInfo> info = ParseTensorInfo(name, root.items[i], data_size);
    if (!info.ok()) return FileError(path, std::string(info.status().message()));
    if (!file.index_.emplace(name, file.entries_.size()).second) {
      return FileError(path, absl::StrCat("tensor \"", name, "\" appears twice in the header"));
    }
    file.entries_.push_back(std::move(info->entry));
    file.begin_offsets_.push_back(info->begin);
  }
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::Status SafetensorsFile::ReadF32(std::string_view name, float* out) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return UserError(
        absl::StrFormat("safetensors file %s has no tensor named \"%s\"", path_, name),
        "tetra reads Hugging Face names, e.g. model.layers.0.self_attn.q_proj.weight",
        absl::StatusCode::kNotFound);
  }
  const SafetensorsEntry& entry = entries_[it->second];
  const char* src = data_ + begin_offsets_[it->second];
  const int64_t n = NumElements(entry.shape);
  if (entry.dtype == DType::kF32) {
    std::memcpy(out, src, n * sizeof(float));
    return absl::OkStatus();
  }
  if (entry.dtype == DType::kBF16 || entry.dtype == DType::kF16) {
    float (*convert)(uint16_t) = entry.dtype == DType::kBF16 ? Bf16ToFloat : Fp16ToFloat;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);  // the data buffer need not be aligned
      out[i] = convert(bits);
    }
    return absl::OkStatus();
  }
  return UserError(
      absl::StrFormat("safetensors file %s: tensor \"%s\" is %s, but only F32, BF16 and F16 "
                      "convert to fp32",
                      path_, name, entry.dtype_name),
      "save the tensor as F32, BF16 or F16 (in PyTorch, .float() before "
      "safetensors.torch.save_file)");
}

// ---------------------------------------------------------------------------
// Writing.

namespace {

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          out->append(absl::StrFormat("\\u%04x", c));
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// The header JSON, padded with spaces to a multiple of 8 bytes so the data
// buffer starts 8-byte aligned.
absl::StatusOr<std::string> BuildHeader(const std::string& path,
                                        const std::vector<SafetensorsTensorRef>& tensors,
                                        DType dtype,
                                        const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    AppendJsonString(kMetadataKey, &header);
    header.append(":{");
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(key, &header);
      header.push_back(':');
      AppendJsonString(value, &header);
    }
    header.push_back('}');
  }
  std::set<std::string_view> names;
  int64_t offset = 0;
  for (const SafetensorsTensorRef& t : tensors) {
    if (t.name == kMetadataKey || !names.insert(t.name).second) {
      return UserError(
          absl::StrCat("cannot write safetensors file ", path, ": tensor name \"", t.name,
                       t.name == kMetadataKey ? "\" is reserved" : "\" appears twice"),
          absl::StrCat("give every tensor its own name, other than \"", std::string(kMetadataKey),
                       "\""));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return UserError(absl::StrCat("cannot write safetensors file ", path, ": tensor \"",
                                      t.name, "\" has negative shape ", ShapeString(t.shape)),
                         "shapes list element counts, which are never negative");
      }
    }
    const int64_t nbytes = NumElements(t.shape) * static_cast<int64_t>(DTypeSize(dtype));
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(t.name, &header);
    absl::StrAppend(&header, ":{\"dtype\":\"", DTypeName(dtype), "\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + nbytes, "]}");
    offset += nbytes;
  }
  header.push_back('}');
  header.resize((header.size() + 7) / 8 * 8, ' ');
  return header;
}

// Writes all of [data, data + size) to fd, retrying short writes.
bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteTensorData(int fd, const SafetensorsTensorRef& t, DType dtype) {
  const int64_t n = NumElements(t.shape);
  TETRA_CHECK(n == 0 || t.data != nullptr) << "tensor " << t.name << " has no data";
  if (dtype == DType::kF32) return WriteAll(fd, t.data, n * sizeof(float));
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> bits(std::min(n, kChunk));
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t count = std::min(kChunk, n - start);
    for (int64_t i = 0; i < count; ++i) bits[i] = FloatToBf16(t.data[start + i]);
    if (!WriteAll(fd, bits.data(), count * sizeof(uint16_t))) return false;
  }
  return true;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensorRef>& tensors, DType dtype,
                              const std::map<std::string, std::string>& metadata) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return UserError(absl::StrCat("cannot write safetensors file ", path, " as ",
                                  DTypeName(dtype), ": tetra writes F32 or BF16"),
                     "export as F32, or as BF16 for half the size (tetra export --dtype bf16)");
  }
  ASSIGN_OR_RETURN(std::string header, BuildHeader(path, tensors, dtype, metadata));

  const std::string tmp_path = path + ".tmp";
  int fd = open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const std::string directory_hint =
      absl::StrCat("check that the directory of ", path, " exists and is writable");
  if (fd < 0) {
    return ErrnoError(errno, "cannot create safetensors file " + tmp_path, directory_hint);
  }
  const uint64_t header_size = header.size();
  bool ok =
      WriteAll(fd, &header_size, kLengthFieldBytes) && WriteAll(fd, header.data(), header.size());
  for (size_t i = 0; ok && i < tensors.size(); ++i) ok = WriteTensorData(fd, tensors[i], dtype);
  // Data must be on disk before the rename makes it visible under `path`.
  ok = ok && fsync(fd) == 0;
  int err = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp_path.c_str());
    return ErrnoError(err, "cannot write safetensors file " + tmp_path,
                      "check that the disk is not full");
  }
  if (rename(tmp_path.c_str(), path.c_str()) != 0) {
    err = errno;
    unlink(tmp_path.c_str());
    return ErrnoError(err, "cannot rename " + tmp_path + " to safetensors file " + path,
                      absl::StrCat(directory_hint, ", and that ", path, " is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace tetra
