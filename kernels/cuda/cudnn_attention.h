// Grouped-query attention through cuDNN's fused flash attention (the
// frontend's scaled dot-product attention graphs), causal or, for ring
// attention's blocks, unmasked over keys of their own length (cuDNN's s_kv
// apart from s_q): tensor-core kernels for bf16, fp32 softmax statistics (the
// same log-sum-exp as our kernels), a deterministic backward where cuDNN has
// one for the shape (else its non-deterministic one, said once), query/key
// head dims that may differ from the values' (MLA). One graph per shape,
// mask and direction, built on first use and cached. libcudnn is loaded at
// run time: where it is missing, turned off (TETRA_CUDNN_ATTENTION=0), or
// has no engine for a shape, these return false having done nothing, saying
// why, and the caller (kernels/cuda/attention_engine.cc) goes on to tetra's
// own kernel, which also stays the fp32 path.
#ifndef TETRA_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define TETRA_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <string>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra::cuda {

// Whether libcudnn.so.9 is loaded and enabled (loaded once per process; a
// warning names why not).
bool CudnnLoaded();

// The op API's Attention / AttentionBackward (kernels/cuda/cuda_ops.h) when
// every tensor is bf16 (lse fp32), 16-byte aligned and cuDNN runs the shape:
// true once enqueued on CurrentStream(); false, with nothing done and *why
// saying why not, otherwise.
bool CudnnAttention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& out, const Tensor& lse, std::string* why);
bool CudnnAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const Tensor& dq, const Tensor& dk, const Tensor& dv, std::string* why);

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_CUDNN_ATTENTION_H_
