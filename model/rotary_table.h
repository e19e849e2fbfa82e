// A layer's RoPE table (kernels/op_types.h) for the sequence length it runs
// at, made on the host and moved to the device the layer computes on, again
// only when the length changes. Under context parallelism its rows are this
// rank's tokens' positions in their sequences (parallel/context_shard.h).
#ifndef TETRA_MODEL_ROTARY_TABLE_H_
#define TETRA_MODEL_ROTARY_TABLE_H_

#include <cstdint>

#include "kernels/op_types.h"
#include "parallel/context_shard.h"

namespace tetra {

class RotaryTable {
 public:
  // `rotary_dim` dims rotate (a whole head in Llama, qk_rope_head_dim in MLA).
  RotaryTable(int64_t rotary_dim, double theta, const RopeScaling& scaling,
              const ContextShard& context = {})
      : rotary_dim_(rotary_dim), theta_(theta), scaling_(scaling), context_(context) {}
  // The table for this rank's `seq` tokens of each sequence, where
  // CurrentPlacement() computes.
  const RopeTable& For(int64_t seq);

 private:
  int64_t rotary_dim_;
  double theta_;
  RopeScaling scaling_;
  ContextShard context_;
  RopeTable table_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_ROTARY_TABLE_H_
