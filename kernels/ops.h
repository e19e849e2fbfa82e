// The op API: every numeric op the layers use, on Tensors, dispatched by the
// tensors' device to the CPU reference kernels (kernels/cpu/) or, when built
// and placed there, the CUDA kernels. Layers are written once against this.
//
// Conventions: N = rows (tokens), fp32 unless stated, token ids int32.
// Activation gradients are written; parameter gradients are accumulated (+=),
// because they sum over micro-batches.
#ifndef TETRA_KERNELS_OPS_H_
#define TETRA_KERNELS_OPS_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra::ops {

// y (N, out) = x (N, in) . w (out, in)^T   (Hugging Face weight layout)
void Linear(const Tensor& x, const Tensor& w, const Tensor& y);
// dw += dy^T x; dx = dy w (or dx += dy w when accumulate_dx). dx may be undefined.
void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx = false);

// out (N, C) = table[tokens]; dtable[tokens] += dout. Ids outside
// [0, table rows) are a bug (checked).
void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out);
void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable);
// Vocabulary-parallel forms: `table` holds ids [vocab_begin, vocab_begin +
// table rows) of the whole vocabulary; a token outside that range gives a
// zero row of out and adds nothing to dtable.
void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out);
void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable);

// y = w * x * rsqrt(mean(x^2) + eps) over the last dim; rstd (N) saved.
void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw);

// In place on x (B, T, H, D), rotate-half convention; table from MakeRopeTable.
void Rope(const Tensor& x, const RopeTable& table);
void RopeBackward(const Tensor& dx, const RopeTable& table);

// Causal grouped-query attention: q (B,T,Hq,D), k/v (B,T,Hkv,D) -> out (B,T,Hq,D), lse (B,Hq,T).
void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse);
void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);

// out = silu(gate) * up, elementwise.
void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                    const Tensor& dgate, const Tensor& dup);

// Sum over rows of -log softmax(logits)[target]; when dlogits is defined it
// receives grad_scale * (softmax - onehot), and may be logits itself.
double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits);

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper);
// Every tensor of the list in one pass (one launch on the device), each with
// or without weight decay and with an optional bf16 copy of the new weights.
void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper);

double SumOfSquares(const Tensor& x);
void Scale(const Tensor& x, float factor);
void Add(const Tensor& x, const Tensor& y);  // y += x
// dst = src in dst's dtype (fp32 <-> bf16, round to nearest even), same device.
void Cast(const Tensor& src, const Tensor& dst);

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OPS_H_
