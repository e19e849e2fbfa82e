// A strict JSON (RFC 8259) reader and the string quoting of its writer, for
// the JSON files tetra reads and writes: safetensors headers and Hugging
// Face's config.json, generation_config.json and model.safetensors.index.json.
// Strict: one document, no comments, no trailing commas, no duplicate object
// keys, UTF-8 checked, nesting bounded; an error says at which byte and why.
#ifndef TETRA_CORE_JSON_H_
#define TETRA_CORE_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tetra {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;            // kBool
  double number = 0;               // kNumber
  std::optional<int64_t> integer;  // kNumber written without fraction or exponent, in int64
  std::string string;              // kString
  std::vector<std::string> keys;   // kObject: member names, in file order
  std::vector<JsonValue> items;    // kArray elements, or kObject member values

  // Member `key` of an object; nullptr when absent (or not an object).
  const JsonValue* Find(std::string_view key) const;
};

// "null", "a boolean", "a number", "a string", "an array", "an object".
const char* JsonKindName(JsonValue::Kind kind);

// Parses `text` as exactly one JSON value with optional whitespace around it.
// On error (InvalidArgument, saying what is wrong) *error_offset, when given,
// is the byte of `text` where the parser stopped.
absl::StatusOr<JsonValue> ParseJson(std::string_view text, size_t* error_offset = nullptr);

// Reads and parses the JSON file at `path` (a regular file of at most
// `max_bytes`). Errors name the path (and the byte where parsing stopped) and
// end with `hint`.
absl::StatusOr<JsonValue> ReadJsonFile(const std::string& path, size_t max_bytes,
                                       const std::string& hint);

// Appends `s` to `out` as a JSON string literal (quotes, escapes).
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace tetra

#endif  // TETRA_CORE_JSON_H_
