// Every op of the op API (kernels/ops.h), by the name the op profile and
// tests know it by (its function's in kernels/ops_*.cc), with the kind of work it is: the
// op profile sums time by kind from this list, and tests/kernels/op_table_test.cc
// runs the op-case table under the profile and checks that every op listed
// here ran and every op that ran is listed.
#ifndef TETRA_KERNELS_OP_LIST_H_
#define TETRA_KERNELS_OP_LIST_H_

#include <string_view>

#include "absl/types/span.h"

namespace tetra::ops {

enum class OpKind { kGemm, kAttention, kNorm, kCrossEntropy, kOptimizer, kMoe, kElementwise };

struct OpEntry {
  std::string_view name;
  OpKind kind;
};

absl::Span<const OpEntry> OpList();
const char* OpKindName(OpKind kind);
// The kind of op `name`; dies naming an op missing from the list.
OpKind KindOfOp(std::string_view name);

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OP_LIST_H_
