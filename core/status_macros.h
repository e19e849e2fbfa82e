// RETURN_IF_ERROR and ASSIGN_OR_RETURN: early-return helpers for absl::Status
// (Debian's Abseil ships neither).
#ifndef TETRA_CORE_STATUS_MACROS_H_
#define TETRA_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TETRA_CONCAT_INNER(a, b) a##b
#define TETRA_CONCAT(a, b) TETRA_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status _tetra_status = (expr);         \
    if (!_tetra_status.ok()) return _tetra_status; \
  } while (0)

#define TETRA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

// ASSIGN_OR_RETURN(auto x, MakeX()) or ASSIGN_OR_RETURN(x, MakeX()).
#define ASSIGN_OR_RETURN(lhs, expr) \
  TETRA_ASSIGN_OR_RETURN_IMPL(TETRA_CONCAT(_tetra_statusor_, __LINE__), lhs, expr)

#endif  // TETRA_CORE_STATUS_MACROS_H_
