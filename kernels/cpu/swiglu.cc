#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/partition.h"
#include "kernels/cpu/vec_math.h"

namespace tetra::cpu {

void SwigluForward(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + VecExp(-g)) * up[i];
  }
}

void SwigluBackward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                    float* dup) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u = up[i];
    const float d = dout[i];
    const float denom = 1.0f + VecExp(-g);
    const float sigmoid = 1.0f / denom;
    // silu'(g) = sigmoid * (1 + g * (1 - sigmoid)), as PyTorch's silu_backward.
    dgate[i] = d * u * (sigmoid * (1.0f + g * (1.0f - sigmoid)));
    dup[i] = d * (g / denom);  // silu(g) rounded as in the forward
  }
}

}  // namespace tetra::cpu
