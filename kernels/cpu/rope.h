// Rotary position embeddings in Hugging Face Llama's rotate-half convention:
// in each head vector x (D), the pair (x[i], x[i + D/2]), i < D/2, is rotated
// by the angle p * inv_freq[i], inv_freq[i] = 1 / theta^(2i/D), p the position.
#ifndef TETRA_KERNELS_CPU_ROPE_H_
#define TETRA_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

namespace tetra::cpu {

// cos and sin of every (position, frequency) angle, (seq, half_dim) each,
// computed as HF does in fp32: inv_freq = 1 / theta^(float(2i) / D), angle =
// float(p) * inv_freq; cos/sin of that fp32 angle, correctly rounded.
struct RopeTable {
  int64_t seq = 0;
  int64_t half_dim = 0;
  std::vector<float> cos;  // (seq, half_dim)
  std::vector<float> sin;  // (seq, half_dim)
};

RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta);

// In place on x (batch, seq, heads, head_dim), position = index along seq:
// out[i] = x[i] cos - x[i + D/2] sin, out[i + D/2] = x[i + D/2] cos + x[i] sin.
void RopeForward(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 const RopeTable& table);

// In place on dx (batch, seq, heads, head_dim): the transposed (inverse)
// rotation, which is the gradient of RopeForward.
void RopeBackward(float* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const RopeTable& table);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ROPE_H_
