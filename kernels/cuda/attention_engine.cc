// Which engine runs a device attention call, in order: cuDNN's fused flash
// attention (its deterministic backward, else its non-deterministic one,
// kernels/cuda/cudnn_attention.h), else tetra's own kernel where it takes
// the shape, else a fatal error giving both reasons and the fix. Each
// shape's engine is logged once per direction, so a run's log (a
// benchmark's above all) says what ran: a silent fall back to the own
// kernel would cut dense MFU about threefold.
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/logging.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_attention.h"

namespace tetra::cuda {
namespace {

std::string DescribeShape(const AttentionShape& s) {
  return "B " + std::to_string(s.batch) + " T " + std::to_string(s.seq) + " Tk " +
         std::to_string(s.keys()) + " Hq " + std::to_string(s.q_heads) + " Hkv " +
         std::to_string(s.kv_heads) + " D " + std::to_string(s.head_dim) + "/" +
         std::to_string(s.value_dim()) + (s.causal ? " causal" : " unmasked");
}

// Logs once per shape and direction which engine runs it (and, for the own
// kernel, why cuDNN did not).
void SayEngine(const AttentionShape& s, bool backward, const char* engine,
               const std::string& why_not_cudnn) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
  static std::mutex mutex;
  static std::map<Key, bool> said;
  std::lock_guard<std::mutex> lock(mutex);
  bool& done = said[Key{s.batch, s.seq, s.keys(), s.q_heads, s.kv_heads, s.head_dim, s.value_dim(),
                        s.causal, backward}];
  if (done) return;
  done = true;
  TETRA_LOG() << "attention " << (backward ? "backward" : "forward") << " " << DescribeShape(s)
              << ": " << engine << (why_not_cudnn.empty() ? "" : " (" + why_not_cudnn + ")");
}

// Fatal unless the own kernel takes `s`, which cuDNN did not take for `why_not_cudnn`.
void ExpectOwnKernelTakes(const AttentionShape& s, bool backward,
                          const std::string& why_not_cudnn) {
  std::string why_not_own;
  TETRA_CHECK(OwnAttentionTakes(s, &why_not_own))
      << "no engine runs attention " << (backward ? "backward" : "forward") << " "
      << DescribeShape(s) << ": cuDNN did not take it (" << why_not_cudnn << ") and " << why_not_own
      << "\nhint: install cuDNN 9 for CUDA 13 (pip install nvidia-cudnn-cu13) with its lib "
         "directory on "
         "LD_LIBRARY_PATH, leave TETRA_CUDNN_ATTENTION unset, and train in bf16";
  SayEngine(s, backward, "tetra's own kernel", why_not_cudnn);
}

}  // namespace

void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse) {
  std::string why;
  if (CudnnAttention(shape, q, k, v, out, lse, &why)) {
    SayEngine(shape, /*backward=*/false, "cuDNN fused flash attention", "");
    return;
  }
  ExpectOwnKernelTakes(shape, /*backward=*/false, why);
  OwnAttention(shape, q, k, v, out, lse);
}

void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  std::string why;
  if (CudnnAttentionBackward(shape, dout, q, k, v, out, lse, dq, dk, dv, &why)) {
    SayEngine(shape, /*backward=*/true, "cuDNN fused flash attention", "");
    return;
  }
  ExpectOwnKernelTakes(shape, /*backward=*/true, why);
  OwnAttentionBackward(shape, dout, q, k, v, out, lse, dq, dk, dv);
}

}  // namespace tetra::cuda
