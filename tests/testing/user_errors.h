// Matching user-facing errors in tests: every UserError (core/user_error.h)
// reads as one line saying what is wrong, then a "hint: " line with the fix.
#ifndef TETRA_TESTS_TESTING_USER_ERRORS_H_
#define TETRA_TESTS_TESTING_USER_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"

namespace tetra::testing {

inline auto UserErrorShape() { return ::testing::MatchesRegex("[^\n]+\nhint: [^\n]+"); }

inline std::string Message(const absl::Status& status) { return std::string(status.message()); }

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_USER_ERRORS_H_
