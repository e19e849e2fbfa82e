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

// The fused q/k/v projection's output, qkv (batch * seq, (q_heads + 2
// kv_heads) x head_dim) holding each token's [q | k | v] head vectors, split
// into q (batch, seq, q_heads, head_dim), k and v (batch, seq, kv_heads,
// head_dim), q and k rotated: the bits of copying the slices and RopeForward
// on q and k, in one pass.
void SplitQkvRope(const float* qkv, int64_t batch, int64_t seq, int64_t q_heads, int64_t kv_heads,
                  int64_t head_dim, const RopeTable& table, float* q, float* k, float* v);

// Its adjoint: dqkv's rows = [RopeBackward(dq) | RopeBackward(dk) | dv],
// written; dq, dk, dv are left as they are.
void MergeQkvRopeBackward(const float* dq, const float* dk, const float* dv, int64_t batch,
                          int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                          const RopeTable& table, float* dqkv);

// MLA's decoupled RoPE, in place on x (batch, seq, heads, head_dim): only the
// last R = 2 half_dim dims of each head rotate, as RopeForward rotates a
// whole head. With `interleaved` (Hugging Face's rope_interleave) those dims
// hold pairs (x[2i], x[2i+1]), which first move to (i, i + R/2), so the
// result is in the rotate-half layout: out[i] = x[2i] cos - x[2i+1] sin,
// out[i + R/2] = x[2i+1] cos + x[2i] sin.
void DecoupledRopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                          const RopeTable& table, bool interleaved);
// Its transpose, in place on dx: rotated back, then (interleaved) the pairs
// moved back to their places.
void DecoupledRopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                           const RopeTable& table, bool interleaved);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ROPE_H_
