// Rotary position embeddings in Hugging Face Llama's rotate-half convention:
// in each head vector x (D), the pair (x[i], x[i + D/2]), i < D/2, is rotated
// by the angle p * inv_freq[i], inv_freq[i] = 1 / theta^(2i/D), p the position.
// The cos/sin table is the backend-neutral RopeTable (kernels/op_types.h).
#ifndef TETRA_KERNELS_CPU_ROPE_H_
#define TETRA_KERNELS_CPU_ROPE_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// In place on x (batch, seq, heads, head_dim), position = index along seq:
// out[i] = x[i] cos - x[i + D/2] sin, out[i + D/2] = x[i + D/2] cos + x[i] sin.
// `table` (from MakeRopeTable) holds host tensors for at least `seq` positions
// and half_dim = head_dim / 2 (checked).
void RopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table);

// In place on dx (batch, seq, heads, head_dim): the transposed (inverse)
// rotation, which is the gradient of RopeForward.
void RopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const RopeTable& table);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ROPE_H_
