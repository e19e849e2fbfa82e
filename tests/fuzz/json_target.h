// The check of one JSON fuzz input (the gtest campaign and
// tools/fuzz/json_fuzzer.cc). ParseJson either fails with a one-line message
// of bounded length at an offset inside the text, or accepts a document that
// an independent reading confirms: its strings are well-formed UTF-8, no
// object repeats a key, the nesting is bounded, an integer is kept exactly
// when it fits int64, and writing the value back out parses to the same value.
#ifndef TETRA_TESTS_FUZZ_JSON_TARGET_H_
#define TETRA_TESTS_FUZZ_JSON_TARGET_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json.h"

namespace tetra::testing {

// RFC 3629 by hand: no overlongs, no surrogates, at most U+10FFFF.
inline bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n;  // continuation bytes
    if (c < 0x80) {
      n = 0;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// `value` as JSON text (numbers exactly: integers as written, doubles with
// 17 significant digits), the test's own writer.
inline void WriteJson(const JsonValue& value, std::string* out) {
  switch (value.kind) {
    case JsonValue::Kind::kNull:
      out->append("null");
      return;
    case JsonValue::Kind::kBool:
      out->append(value.boolean ? "true" : "false");
      return;
    case JsonValue::Kind::kNumber:
      if (value.integer) {
        out->append(absl::StrCat(*value.integer));
      } else {
        std::string text = absl::StrFormat("%.17g", value.number);
        // Still a non-integer literal ("-0" would read back as the integer 0).
        if (text.find_first_of(".e") == std::string::npos) text += ".0";
        out->append(text);
      }
      return;
    case JsonValue::Kind::kString:
      AppendJsonString(value.string, out);
      return;
    case JsonValue::Kind::kArray:
    case JsonValue::Kind::kObject: {
      const bool object = value.kind == JsonValue::Kind::kObject;
      out->push_back(object ? '{' : '[');
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i > 0) out->push_back(',');
        if (object) {
          AppendJsonString(value.keys[i], out);
          out->push_back(':');
        }
        WriteJson(value.items[i], out);
      }
      out->push_back(object ? '}' : ']');
      return;
    }
  }
}

inline bool SameJson(const JsonValue& a, const JsonValue& b) {
  if (a.kind != b.kind || a.boolean != b.boolean || a.string != b.string || a.keys != b.keys ||
      a.integer != b.integer || a.items.size() != b.items.size()) {
    return false;
  }
  if (a.kind == JsonValue::Kind::kNumber && a.number != b.number) return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    if (!SameJson(a.items[i], b.items[i])) return false;
  }
  return true;
}

inline std::string AcceptedJsonProblem(const JsonValue& value, int depth) {
  if (depth > 65) return "accepted nesting deeper than the bound";
  if (value.kind == JsonValue::Kind::kString && !IsUtf8(value.string)) return "accepted bad UTF-8";
  if (value.kind == JsonValue::Kind::kObject) {
    if (value.keys.size() != value.items.size()) return "keys and values differ in number";
    std::set<std::string> keys;
    for (const std::string& key : value.keys) {
      if (!IsUtf8(key)) return "accepted a key of bad UTF-8";
      if (!keys.insert(key).second) return "accepted a duplicate key";
    }
  } else if (!value.keys.empty()) {
    return "keys outside an object";
  }
  if (value.kind == JsonValue::Kind::kNumber && value.integer &&
      static_cast<double>(*value.integer) != value.number) {
    return "an integer whose double differs";
  }
  for (const JsonValue& item : value.items) {
    if (std::string p = AcceptedJsonProblem(item, depth + 1); !p.empty()) return p;
  }
  return "";
}

inline std::string JsonProblem(const std::string& text) {
  size_t error_offset = 0;
  absl::StatusOr<JsonValue> value = ParseJson(text, &error_offset);
  if (!value.ok()) {
    const std::string message(value.status().message());
    if (message.empty() || message.find('\n') != std::string::npos || message.size() > 300) {
      return "error not one short line: " + message.substr(0, 300);
    }
    if (error_offset > text.size()) return "error offset past the end";
    return "";
  }
  if (std::string p = AcceptedJsonProblem(*value, 0); !p.empty()) return p;
  std::string written;
  WriteJson(*value, &written);
  absl::StatusOr<JsonValue> again = ParseJson(written);
  if (!again.ok()) {
    return absl::StrCat("its own writing does not parse: ", again.status().message());
  }
  if (!SameJson(*value, *again)) return "writing and parsing again changes the value";
  return "";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_JSON_TARGET_H_
