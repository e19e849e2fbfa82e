// Causal multi-head attention with grouped-query attention (GQA) on the CPU,
// forward and backward, in fp32: the reference the CUDA kernels are tested
// against and the CPU training path.
//
// Scores are q.k / sqrt(D) with a causal mask (query t sees keys 0..t). Query
// head h reads kv head h / (Hq / Hkv), as Hugging Face's repeat_kv does.
// Values and outputs may have a head dim Dv of their own (DeepSeek-V3's MLA).
// The kernels work on tiles of query rows, so memory is linear in the
// sequence length: the forward saves only the log-sum-exp of each query row,
// and the backward recomputes the probabilities from it (FlashAttention-2
// style).
#ifndef TETRA_KERNELS_CPU_ATTENTION_H_
#define TETRA_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// q: (B, T, Hq, D); k: (B, T, Hkv, D); v: (B, T, Hkv, Dv), Dv = s.value_dim().
// out: (B, T, Hq, Dv); lse: (B, Hq, T), the log-sum-exp of each query row's
// scaled scores, saved for the backward.
void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* out, float* lse);

// q: (B, T, Hq, D); k: (B, T, Hkv, D); v: (B, T, Hkv, Dv); dout, out:
// (B, T, Hq, Dv); lse: (B, Hq, T) from the forward. Writes (overwrites) dq,
// dk and dv, each shaped as its input.
// Bit-identical run to run and for any thread count: every (batch, kv head)
// is one task that sums its query heads' contributions in a fixed order.
void AttentionBackward(const AttentionShape& s, const float* dout, const float* q, const float* k,
                       const float* v, const float* out, const float* lse, float* dq, float* dk,
                       float* dv);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ATTENTION_H_
