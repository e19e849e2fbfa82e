// The LM head and the token cross-entropy, vocabulary-parallel: with the
// vocabulary padded to Vp rows (PaddedVocabSize), TP rank r holds rows
// [r*Vp/tp, (r+1)*Vp/tp) of lm_head.weight (the embedding's own shard when
// tied), computes the logits of its vocabulary slice from the whole (N, C)
// input, entering the tensor-parallel region (CopyTo..., or under SP
// GatherFromSequenceParallelRegion), and the loss comes from the
// vocab-parallel cross-entropy, which never gathers the (N, V) logits. The
// forward GEMM keeps the padded width (a whole number of tensor-core tiles;
// the loss leaves padding out), the backward's take only the real rows.
#ifndef TETRA_MODEL_LM_HEAD_LAYER_H_
#define TETRA_MODEL_LM_HEAD_LAYER_H_

#include "model/activation_slots.h"
#include "model/layer.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "parallel/tensor_parallel.h"

namespace tetra {

class LmHeadLayer : public Layer {
 public:
  // `weight` (Vp/tp, C) is lm_head.weight or, when tied, model.embed_tokens.weight;
  // its gradient goes through `weight_gradients` (its store's).
  LmHeadLayer(Parameter& weight, WeightGradients& weight_gradients,
              const LayerParallelism& parallelism = SingleRankParallelism());
  // x (residual layout), targets (N) int32 -> the sum of the N token
  // cross-entropies (the same on every TP rank). With `with_grad` the logits
  // are overwritten by grad_scale x their gradient, kept for Backward in
  // `slot` (activation_slots.h) with the input.
  double ForwardLoss(int slot, const Tensor& x, const Tensor& targets, float grad_scale,
                     bool with_grad);
  // -> d x (residual layout) of the forward of `slot`; accumulates the
  // weight gradient.
  Tensor Backward(int slot);

 private:
  struct Activations {
    explicit Activations(const TensorParallelRegion& like)
        : entry(like.tp(), like.sequence_parallel()) {}
    TensorParallelRegion entry;  // Enter's, one per slot (activation_slots.h)
    Tensor x, logits;            // x (N, C), logits (N, Vp/tp)
  };
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override {
    region_.Release();
    ReleaseTensors({&dx_});
  }

  Parameter& weight_;
  WeightGradients& weight_gradients_;
  TensorParallelRegion region_;  // the backward pass
  ActivationSlots<Activations> slots_;
  Tensor dx_;  // backward scratch
};

}  // namespace tetra

#endif  // TETRA_MODEL_LM_HEAD_LAYER_H_
