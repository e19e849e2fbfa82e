// The SwiGLU gate of a Llama MLP: out = silu(gate) * up, silu(g) = g * sigmoid(g)
// = g / (1 + exp(-g)), elementwise. The packed forms take gate and up as the
// two halves of each row of one (rows, 2 x width) tensor, the output of the
// fused gate/up GEMM (model/mlp_layer.cc); they run the same loop as the
// separate forms, so both give the same bits.
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

// gate_up (rows, 2 x width): each row's gate, then its up -> out (rows, width).
void SwigluPackedForward(const float* gate_up, int64_t rows, int64_t width, float* out);

// dout (rows, width), gate_up (rows, 2 x width) -> dgate_up (rows, 2 x width):
// each row's dgate, then its dup, written. dgate_up may alias gate_up.
void SwigluPackedBackward(const float* dout, const float* gate_up, int64_t rows, int64_t width,
                          float* dgate_up);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_SWIGLU_H_
