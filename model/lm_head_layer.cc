#include "model/lm_head_layer.h"

#include "kernels/ops.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace tetra {

LmHeadLayer::LmHeadLayer(Parameter& weight, WeightGradients& weight_gradients,
                         const LayerParallelism& parallelism)
    : weight_(weight),
      weight_gradients_(weight_gradients),
      region_(*parallelism.tp, parallelism.sequence_parallel) {}

double LmHeadLayer::ForwardLoss(int slot, const Tensor& x, const Tensor& targets, float grad_scale,
                                bool with_grad) {
  Activations& a = slots_.ForForward(slot, region_);
  a.x = a.entry.Enter(x);
  EnsureShape(&a.logits, {a.x.numel() / a.x.dim(-1), weight_.value.dim(0)});
  ops::Linear(a.x, weight_.compute, a.logits);
  // The fused cross-entropy overwrites the logits with their gradient.
  return VocabParallelCrossEntropy(a.logits, targets, grad_scale, with_grad ? a.logits : Tensor(),
                                   region_.tp(), weight_.global_shape[0]);
}

Tensor LmHeadLayer::Backward(int slot) {
  const Activations& a = slots_.ForBackward(slot);
  EnsureShape(&dx_, a.x.shape());
  // logits = x . W^T: d x = dlogits . W, d W += dlogits^T x, over the real
  // rows only: a sum over padding columns would round d x otherwise (their
  // zeros change the GEMM's blocking), and the padding rows of d W stay 0.
  // The logits' gradient lives in the slot until W: no copy.
  weight_gradients_.LinearBackward(a.logits, a.x, weight_.compute, dx_, weight_.grad,
                                   /*accumulate_dx=*/false,
                                   weight_.RealElements() / weight_.value.dim(1));
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
