#include "core/user_error.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace tetra {

std::string UserPath(std::string_view path) {
  constexpr size_t kMaxShown = 256;
  const bool printable = std::all_of(path.begin(), path.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c < 0x7f;
  });
  return printable && path.size() <= kMaxShown ? std::string(path) : UserText(path, kMaxShown);
}

std::string UserText(std::string_view text, size_t max_chars) {
  const std::string_view shown = text.substr(0, max_chars);
  std::string out = "\"";
  for (char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += ch;
    }
  }
  out += '"';
  if (shown.size() < text.size()) absl::StrAppendFormat(&out, "... (%d bytes)", text.size());
  return out;
}

}  // namespace tetra
