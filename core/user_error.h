// UserError: the one shape of an error a user can cause (bad config, files,
// launch, data): one sentence saying what is wrong, with the numbers, then a
// line "hint: ..." saying how to fix it. tools/ prints it after "tetra: error: ".
// UserText: how such a message quotes text that came from the user (a file's
// key, a config string), so a 1 MB name never floods the terminal.
#ifndef TETRA_CORE_USER_ERROR_H_
#define TETRA_CORE_USER_ERROR_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tetra {

inline absl::Status UserError(const std::string& what, const std::string& hint,
                              absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  return absl::Status(code, what + "\nhint: " + hint);
}

// `text` in double quotes, cut to its first `max_chars` bytes plus "...
// (N bytes)" when longer; control bytes and non-ASCII bytes shown as \xNN,
// so what is printed is one short line whatever the input holds.
std::string UserText(std::string_view text, size_t max_chars = 64);

// A path the user gave, for a message: as it is when it is printable and at
// most 256 bytes, else as UserText cuts it (a 100 kB path is one short line).
std::string UserPath(std::string_view path);

}  // namespace tetra

#endif  // TETRA_CORE_USER_ERROR_H_
