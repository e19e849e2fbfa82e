// How the data-parallel reducer and the distributed optimizer see parameters:
// not as named tensors (parallel/ sits below model/) but as segments of one
// flat fp32 buffer of values and one of gradients, at the same offsets. The
// trainer builds the segments from its ParameterStore; elements outside every
// segment (alignment gaps, padding) are zero and never updated.
#ifndef TETRA_PARALLEL_FLAT_SEGMENT_H_
#define TETRA_PARALLEL_FLAT_SEGMENT_H_

#include <cstdint>

namespace tetra {

// One parameter's elements [offset, offset + numel) of the flat buffers.
struct FlatSegment {
  int64_t offset = 0;
  int64_t numel = 0;
  bool weight_decay = false;  // AdamW decay: matrices yes, norm weights no
  // Its weight in the global gradient norm: 1 / (ranks of the norm group
  // holding this same slice), so a slice replicated over tensor-parallel ranks
  // (a norm weight) counts once, not tp times.
  double norm_weight = 1.0;
};

// Elements [begin, end) of a flat buffer.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_FLAT_SEGMENT_H_
