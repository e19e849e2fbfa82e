// Multi-head attention with grouped-query attention (GQA) on the CPU,
// forward and backward, in fp32: the reference the CUDA kernels are tested
// against and the CPU training path; and the merge of two attentions of the
// same queries by their log-sum-exps (ring attention).
//
// Scores are q.k * scale (AttentionShape::scale()), causal (query t sees keys
// 0..t) or, with AttentionShape::causal false, over every key of a key
// sequence of its own length Tk (a block of ring attention). Query head h
// reads kv head h / (Hq / Hkv), as Hugging Face's repeat_kv does. Values and
// outputs may have a head dim Dv of their own (DeepSeek-V3's MLA). The
// kernels work on tiles of query rows, so memory is linear in the sequence
// length: the forward saves only the log-sum-exp of each query row, and the
// backward recomputes the probabilities from it (FlashAttention-2 style).
#ifndef TETRA_KERNELS_CPU_ATTENTION_H_
#define TETRA_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// q: (B, T, Hq, D); k: (B, Tk, Hkv, D); v: (B, Tk, Hkv, Dv), Tk = s.keys(),
// Dv = s.value_dim(). out: (B, T, Hq, Dv); lse: (B, Hq, T), the log-sum-exp
// of each query row's scaled scores, saved for the backward.
void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* out, float* lse);

// q: (B, T, Hq, D); k: (B, Tk, Hkv, D); v: (B, Tk, Hkv, Dv); dout, out:
// (B, T, Hq, Dv); lse: (B, Hq, T). Writes (overwrites) dq, dk and dv, each
// shaped as its input. The probabilities are exp(scale * q.k - lse) and
// delta = rowsum(dout * out) of the out and lse given, which may be those of
// a larger attention whose keys include these (ring attention's merged ones).
// Bit-identical run to run and for any thread count: every (batch, kv head)
// is one task that sums its query heads' contributions in a fixed order.
void AttentionBackward(const AttentionShape& s, const float* dout, const float* q, const float* k,
                       const float* v, const float* out, const float* lse, float* dq, float* dk,
                       float* dv);

// ops::AttentionMerge: out (B, T, H, Dv) and lse (B, H, T) become the
// attention over their keys and part_out/part_lse's (same shapes) together.
// A side whose lse is -inf adds nothing; a row with both -inf is left as it
// is.
void AttentionMerge(int64_t batch, int64_t seq, int64_t heads, int64_t value_dim,
                    const float* part_out, const float* part_lse, float* out, float* lse);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ATTENTION_H_
