// tetra's own attention kernels (kernels/cuda/attention.cu), causal or not,
// k and v of shape.keys() steps: q, k, v, out, dout, dq, dk, dv share a dtype
// (fp32 or bf16); lse fp32 (B, Hq, T). The engine choice
// (kernels/cuda/attention_engine.cc) runs them where cuDNN does not take a call.
#ifndef TETRA_KERNELS_CUDA_ATTENTION_KERNELS_H_
#define TETRA_KERNELS_CUDA_ATTENTION_KERNELS_H_

#include <string>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra::cuda {

// Whether these kernels take `shape` (head dims up to 128); if not, *why says so.
bool OwnAttentionTakes(const AttentionShape& shape, std::string* why);
void OwnAttention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, const Tensor& lse);
void OwnAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_ATTENTION_KERNELS_H_
