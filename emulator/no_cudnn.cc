// cuDNN on the emulated device: reported missing, as on a machine without
// libcudnn, so attention takes the path such a machine takes (tetra's own
// kernel; kernels/cuda/attention_engine.cc). Linked in place of
// kernels/cuda/cudnn_attention.cc, whose graphs need the real library.
#include "kernels/cuda/cudnn_attention.h"

namespace tetra::cuda {
namespace {

constexpr char kWhy[] = "the emulated GPU has no cuDNN";

}  // namespace

bool CudnnLoaded() { return false; }

bool CudnnAttention(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, const Tensor&, std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

bool CudnnAttentionBackward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&, const Tensor&, std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

}  // namespace tetra::cuda
