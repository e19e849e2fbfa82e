#include "model/model_dims.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// The largest divisor of `n` that is at most `limit`.
int LargestDivisorUpTo(int64_t n, int limit) {
  for (int d = limit; d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// `field` (its value `n`) must split evenly over tp ranks.
absl::Status CheckDivisible(const std::string& field, int64_t n, const std::string& what, int tp) {
  if (n % tp == 0) return absl::OkStatus();
  const std::string multiple =
      absl::StrCat(field, " to a multiple of ", tp, " (e.g. ", (n + tp - 1) / tp * tp, ")");
  const int divisor = LargestDivisorUpTo(n, tp);
  return UserError(
      absl::StrCat(field, " ", n, " is not divisible by parallel.tensor ", tp, ": each of the ", tp,
                   " tensor-parallel ranks holds an equal share of the ", what),
      divisor > 1 ? absl::StrCat("set parallel.tensor to a divisor of ", n, " (e.g. ", divisor,
                                 "), or ", multiple)
                  : absl::StrCat("set ", multiple, ", or parallel.tensor to 1"));
}

}  // namespace

absl::Status ValidateTensorParallel(const ModelConfig& c, int tp, bool sequence_parallel,
                                    int64_t rows_per_micro_batch) {
  if (tp < 1) {
    return UserError(absl::StrCat("parallel.tensor is ", tp, " but must be at least 1"),
                     "set parallel.tensor to 1 (no tensor parallelism) or a divisor of the "
                     "attention heads, e.g. 2, 4 or 8");
  }
  if (tp == 1) return absl::OkStatus();
  RETURN_IF_ERROR(
      CheckDivisible("model.num_attention_heads", c.num_attention_heads(), "query heads", tp));
  const int kv = KeyValueHeads(c);
  // MLA's keys and values are per query head, split with them.
  if (!UsesMla(c) && kv % tp != 0 && tp % kv != 0) {
    return UserError(
        absl::StrCat("model.num_key_value_heads ", kv, " and parallel.tensor ", tp,
                     " do not divide one another: each tensor-parallel rank holds kv / tp "
                     "key-value heads (kv a multiple of tp) or one shared by tp / kv ranks (tp a "
                     "multiple of kv)"),
        absl::StrCat("set parallel.tensor to a divisor or a multiple of ", kv, " (e.g. ",
                     LargestDivisorUpTo(kv, tp), ")"));
  }
  RETURN_IF_ERROR(CheckDivisible("model.intermediate_size", c.intermediate_size(),
                                 "MLP's intermediate features", tp));
  if (sequence_parallel && rows_per_micro_batch % tp != 0) {
    return UserError(
        absl::StrCat(
            "parallel.sequence_parallel splits the ", rows_per_micro_batch,
            " token rows a rank holds of a micro-batch (train.micro_batch_size x train.seq_length "
            "/ parallel.context) "
            "over parallel.tensor ",
            tp, " ranks, but ", rows_per_micro_batch, " is not a multiple of ", tp),
        absl::StrCat("set train.seq_length or train.micro_batch_size so that those rows are a "
                     "multiple of ",
                     tp, ", or set parallel.sequence_parallel to false"));
  }
  return absl::OkStatus();
}

}  // namespace tetra
