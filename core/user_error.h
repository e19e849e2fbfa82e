// UserError: the one shape of an error a user can cause (bad config, files,
// launch, data): one sentence saying what is wrong, with the numbers, then a
// line "hint: ..." saying how to fix it. tools/ prints it after "tetra: error: ".
#ifndef TETRA_CORE_USER_ERROR_H_
#define TETRA_CORE_USER_ERROR_H_

#include <string>

#include "absl/status/status.h"

namespace tetra {

inline absl::Status UserError(const std::string& what, const std::string& hint,
                              absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  return absl::Status(code, what + "\nhint: " + hint);
}

}  // namespace tetra

#endif  // TETRA_CORE_USER_ERROR_H_
