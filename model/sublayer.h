// Sublayer: a layer from rows of the residual stream to rows of the same
// shape, behind one interface so that the code composing them needs not know
// which kind it holds: a decoder block's attention (AttentionLayer,
// MlaAttentionLayer) and MLP (MlpLayer, MoeMlpLayer), the block itself, and
// full recompute's wrapper of a block (RecomputedSublayer).
#ifndef TETRA_MODEL_SUBLAYER_H_
#define TETRA_MODEL_SUBLAYER_H_

#include <cstdint>

#include "core/tensor.h"
#include "model/layer.h"

namespace tetra {

// What a forward hands its sublayers besides the rows; each reads what it
// needs (attention the shape, an MoE MLP all of it).
struct ForwardPass {
  int64_t batch = 0, seq = 0;  // B sequences of T tokens
  // The weight of the cross-entropy sum in the objective, which an MoE MLP's
  // balance loss shares.
  float grad_scale = 0;
  bool with_grad = true;   // a backward follows; false in evaluation
  bool recompute = false;  // activation recompute's second forward: an MoE MLP counts no stats
};

class Sublayer : public Layer {
 public:
  // x (rows, C) in the residual layout (model_parallelism.h) -> y (rows, C),
  // valid until the next forward in `slot`; keeps what the backward needs in
  // `slot` (activation_slots.h).
  virtual Tensor Forward(int slot, const Tensor& x, const ForwardPass& pass) = 0;
  // dy (rows, C) of the forward of `slot` -> dx (rows, C), written;
  // accumulates the weight gradients.
  virtual Tensor Backward(int slot, const Tensor& dy) = 0;
  // Selective recompute: an MLP keeps gate and up but not their SwiGLU
  // activation, which its backward computes again; the others keep all.
  virtual void set_recompute_activation(bool /*recompute*/) {}
};

}  // namespace tetra

#endif  // TETRA_MODEL_SUBLAYER_H_
