// The SwiGLU gate of a Llama MLP: out = silu(gate) * up, silu(g) = g * sigmoid(g)
// = g / (1 + exp(-g)), elementwise.
#ifndef TETRA_KERNELS_CPU_SWIGLU_H_
#define TETRA_KERNELS_CPU_SWIGLU_H_

#include <cstdint>

namespace tetra::cpu {

// out (n) = silu(gate) * up. out may alias gate or up.
void SwigluForward(const float* gate, const float* up, int64_t n, float* out);

// dgate (n) = dout * up * silu'(gate), dup (n) = dout * silu(gate), both
// written. Elementwise, so dgate / dup may alias gate / up / dout.
void SwigluBackward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                    float* dup);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_SWIGLU_H_
