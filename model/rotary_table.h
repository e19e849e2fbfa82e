// A layer's RoPE table (kernels/op_types.h) for the sequence length it runs
// at, made on the host and moved to the device the layer computes on, again
// only when the length changes.
#ifndef TETRA_MODEL_ROTARY_TABLE_H_
#define TETRA_MODEL_ROTARY_TABLE_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra {

class RotaryTable {
 public:
  // `rotary_dim` dims rotate (a whole head in Llama, qk_rope_head_dim in MLA).
  RotaryTable(int64_t rotary_dim, double theta, const RopeScaling& scaling)
      : rotary_dim_(rotary_dim), theta_(theta), scaling_(scaling) {}
  // The table for `seq` positions, where CurrentPlacement() computes.
  const RopeTable& For(int64_t seq);

 private:
  int64_t rotary_dim_;
  double theta_;
  RopeScaling scaling_;
  RopeTable table_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_ROTARY_TABLE_H_
