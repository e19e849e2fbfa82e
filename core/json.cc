#include "core/json.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// Deeper documents are refused: the files tetra reads nest a few levels, and
// the bound keeps a hostile file from exhausting the stack.
constexpr int kMaxDepth = 64;

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument(size_t* error_offset) {
    JsonValue value;
    SkipWhitespace();
    bool ok = ParseValue(&value, 0);
    if (ok) {
      SkipWhitespace();
      if (pos_ != text_.size()) ok = Fail("unexpected characters after the JSON value");
    }
    if (!ok) {
      if (error_offset != nullptr) *error_offset = pos_;
      return absl::InvalidArgumentError(error_);
    }
    return value;
  }

 private:
  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  unsigned char Peek() const { return static_cast<unsigned char>(text_[pos_]); }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r'))
      ++pos_;
  }

  static std::string Describe(unsigned char c) {
    if (c >= 0x20 && c < 0x7f) return absl::StrFormat("'%c'", c);
    return absl::StrFormat("byte 0x%02x", c);
  }

  bool ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxDepth)
      return Fail(absl::StrCat("JSON nested deeper than ", kMaxDepth, " levels"));
    SkipWhitespace();
    if (AtEnd()) return Fail("the text ends where a value was expected");
    const unsigned char c = Peek();
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return ParseString(&out->string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    for (auto [word, kind, boolean] : {std::tuple{"true", JsonValue::Kind::kBool, true},
                                       std::tuple{"false", JsonValue::Kind::kBool, false},
                                       std::tuple{"null", JsonValue::Kind::kNull, false}}) {
      if (text_.substr(pos_).starts_with(word)) {
        pos_ += std::string_view(word).size();
        out->kind = kind;
        out->boolean = boolean;
        return true;
      }
    }
    return Fail(absl::StrCat("expected a JSON value, found ", Describe(c)));
  }

  bool ParseObject(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    ++pos_;                                 // '{'
    absl::flat_hash_set<std::string> seen;  // a header may hold tens of thousands of keys
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipWhitespace();
      if (AtEnd()) return Fail("the text ends inside an object");
      if (Peek() != '"')
        return Fail(absl::StrCat("expected a string key, found ", Describe(Peek())));
      const size_t key_start = pos_;
      std::string key;
      if (!ParseString(&key)) return false;
      if (!seen.insert(key).second) {
        pos_ = key_start;
        return Fail(absl::StrCat("object key ", UserText(key), " appears twice"));
      }
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Fail("expected ':' after an object key");
      ++pos_;
      out->keys.push_back(std::move(key));
      out->items.emplace_back();
      if (!ParseValue(&out->items.back(), depth + 1)) return false;
      SkipWhitespace();
      if (AtEnd()) return Fail("the text ends inside an object");
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      if (Peek() != ',')
        return Fail(
            absl::StrCat("expected ',' or '}' after an object member, found ", Describe(Peek())));
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
      if (AtEnd()) return Fail("the text ends inside an array");
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      if (Peek() != ',')
        return Fail(
            absl::StrCat("expected ',' or ']' after an array element, found ", Describe(Peek())));
      ++pos_;
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Fail("the text ends inside a \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const unsigned char c = Peek();
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
    if (AtEnd()) return Fail("the text ends inside a string escape");
    const unsigned char c = Peek();
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
    const unsigned char lead = Peek();
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
    if (text_.size() - pos_ <= static_cast<size_t>(continuation))
      return Fail("the text ends inside a UTF-8 sequence");
    for (int i = 1; i <= continuation; ++i) {
      const auto c = static_cast<unsigned char>(text_[pos_ + i]);
      const unsigned char lo = i == 1 ? second_min : 0x80, hi = i == 1 ? second_max : 0xbf;
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
      if (AtEnd()) return Fail("the text ends inside a string");
      const unsigned char c = Peek();
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

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool ParseNumber(JsonValue* out) {
    out->kind = JsonValue::Kind::kNumber;
    const size_t start = pos_;
    auto digits = [&] {
      const size_t first = pos_;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9') ++pos_;
      return pos_ - first;
    };
    if (Peek() == '-') ++pos_;
    if (AtEnd() || Peek() < '0' || Peek() > '9') return Fail("expected a digit in a number");
    const size_t int_start = pos_;
    if (digits() > 1 && text_[int_start] == '0') {
      pos_ = int_start;
      return Fail("leading zeros are not allowed in JSON numbers");
    }
    bool integral = true;
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) return Fail("expected a digit after the decimal point");
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      integral = false;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (digits() == 0) return Fail("expected a digit in the exponent");
    }
    const std::string_view literal = text_.substr(start, pos_ - start);
    if (integral) {
      int64_t value;
      const auto [end, error] =
          std::from_chars(literal.data(), literal.data() + literal.size(), value);
      if (error == std::errc() && end == literal.data() + literal.size()) out->integer = value;
    }
    const auto [end, error] =
        std::from_chars(literal.data(), literal.data() + literal.size(), out->number);
    if (error == std::errc::result_out_of_range || !std::isfinite(out->number)) {
      pos_ = start;
      return Fail("number out of the range of a double");
    }
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

const char* JsonKindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kNumber:
      return "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "?";
}

absl::StatusOr<JsonValue> ParseJson(std::string_view text, size_t* error_offset) {
  return JsonParser(text).ParseDocument(error_offset);
}

absl::StatusOr<JsonValue> ReadJsonFile(const std::string& path, size_t max_bytes,
                                       const std::string& hint) {
  ASSIGN_OR_RETURN(const InputFile file, InputFile::Open(path, "JSON file", hint));
  if (static_cast<uint64_t>(file.size()) > max_bytes) {
    return UserError(absl::StrCat(path, " is ", file.size(), " bytes, more than the ", max_bytes,
                                  " such a JSON file could need"),
                     hint);
  }
  ASSIGN_OR_RETURN(const std::string text, file.ReadAll());
  size_t offset = 0;
  absl::StatusOr<JsonValue> value = ParseJson(text, &offset);
  if (!value.ok()) {
    return UserError(
        absl::StrCat(path, " is not valid JSON: at byte ", offset, ": ", value.status().message()),
        hint);
  }
  return value;
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
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

}  // namespace tetra
