// The LM head and the token cross-entropy, vocabulary-parallel: TP rank r
// holds rows [r*V/tp, (r+1)*V/tp) of lm_head.weight (the embedding's own
// shard when tied), computes the logits of its vocabulary slice from the
// whole (N, C) input, entering the tensor-parallel region (CopyTo..., or
// under SP GatherFromSequenceParallelRegion), and the loss comes from the
// vocab-parallel cross-entropy, which never gathers the (N, V) logits.
#ifndef TETRA_MODEL_LM_HEAD_LAYER_H_
#define TETRA_MODEL_LM_HEAD_LAYER_H_

#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "parallel/tensor_parallel.h"

namespace tetra {

class LmHeadLayer {
 public:
  // `weight` (V/tp, C) is lm_head.weight or, when tied, model.embed_tokens.weight.
  explicit LmHeadLayer(Parameter& weight,
                       const LayerParallelism& parallelism = SingleRankParallelism());
  // x (residual layout), targets (N) int32 -> the sum of the N token
  // cross-entropies (the same on every TP rank). With `with_grad` the logits
  // are overwritten by grad_scale x their gradient, kept for Backward.
  double ForwardLoss(const Tensor& x, const Tensor& targets, float grad_scale, bool with_grad);
  // -> d x (residual layout); accumulates the weight gradient.
  Tensor Backward();

 private:
  Parameter& weight_;
  TensorParallelRegion region_;
  Tensor x_, logits_, dx_;  // x_ (N, C), logits_ (N, V/tp)
};

}  // namespace tetra

#endif  // TETRA_MODEL_LM_HEAD_LAYER_H_
