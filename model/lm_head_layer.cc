#include "model/lm_head_layer.h"

#include "kernels/ops.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace tetra {

LmHeadLayer::LmHeadLayer(Parameter& weight, const LayerParallelism& parallelism)
    : weight_(weight), region_(*parallelism.tp, parallelism.sequence_parallel) {}

double LmHeadLayer::ForwardLoss(const Tensor& x, const Tensor& targets, float grad_scale,
                                bool with_grad) {
  x_ = region_.Enter(x);
  EnsureShape(&logits_, {x_.numel() / x_.dim(-1), weight_.value.dim(0)});
  ops::Linear(x_, weight_.value, logits_);
  // The fused cross-entropy overwrites the logits with their gradient.
  return VocabParallelCrossEntropy(logits_, targets, grad_scale, with_grad ? logits_ : Tensor(),
                                   region_.tp());
}

Tensor LmHeadLayer::Backward() {
  EnsureShape(&dx_, x_.shape());
  // logits = x . W^T: d x = dlogits . W, d W += dlogits^T x.
  ops::LinearBackward(logits_, x_, weight_.value, dx_, weight_.grad);
  return region_.EnterBackward(dx_);
}

}  // namespace tetra
