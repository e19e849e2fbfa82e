// One depth of multi-token prediction (DeepSeek-V3 report, section 2.2, as
// Megatron-Core's MultiTokenPredictionLayer computes it). Depth k (1..D) is
// model.layers.{L + k - 1} (L = num_hidden_layers); for the token at position
// i of its sequence, with h_{k-1} depth k-1's normalised hidden state (depth
// 0: model.norm's output, what the main LM head reads):
//   u   = eh_proj([enorm(embed(token i + k)) | hnorm(h_{k-1})])    (2C -> C)
//   h_k = shared_head.norm(block(u))      the block of layer index L + k - 1
//   loss: cross-entropy of lm_head(h_k) against token i + k + 1
// with the shared embedding table and LM head. Positions whose target lies
// past the sequence (the last k) are left out of the loss; their input token
// is 0 (Megatron's rolled-in id), which only they see (causal attention),
// though an MoE block's router counts them. Rows are in the residual layout
// (model_parallelism.h), as for every block; eh_proj is whole on every
// tensor-parallel rank, its gradient a part of the group's sum under
// sequence parallelism, like the norms'.
#ifndef TETRA_MODEL_MULTI_TOKEN_PREDICTION_LAYER_H_
#define TETRA_MODEL_MULTI_TOKEN_PREDICTION_LAYER_H_

#include <cstdint>
#include <memory>

#include "model/activation_slots.h"
#include "model/decoder_block.h"
#include "model/embedding_layer.h"
#include "model/layer.h"
#include "model/lm_head_layer.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "model/rmsnorm_layer.h"
#include "proto/config.pb.h"

namespace tetra {

class MultiTokenPredictionLayer : public Layer {
 public:
  // Registers depth `depth`'s parameters; `embedding_table` and `head_weight`
  // are the model's shared ones (on a later pipeline stage, its copies).
  MultiTokenPredictionLayer(ParameterStore& store, int depth, const ModelConfig& config,
                            Parameter& embedding_table, Parameter& head_weight,
                            const LayerParallelism& parallelism = SingleRankParallelism());

  // h_prev (rows, C): depth k-1's normalised hidden state, kept (the
  // caller's) until Backward; targets (B*T, host memory): the micro-batch's
  // next-token ids. Returns h_k (rows, C), valid until the next forward in
  // `slot`, and stores in *loss_sum the sum of this depth's token
  // cross-entropies, whose gradient is scaled by `loss_grad_scale`;
  // `grad_scale` is the main cross-entropy's, which an MoE block's balance
  // loss shares.
  const Tensor& Forward(int slot, const Tensor& h_prev, const int32_t* targets, int64_t batch,
                        int64_t seq, float grad_scale, float loss_grad_scale, double* loss_sum);
  // d_next (rows, C): the gradient of h_k from depth k + 1 (undefined at the
  // last depth). Accumulates the parameter gradients (the shared table's and
  // head's included) and returns d h_prev, valid until the next backward.
  const Tensor& Backward(int slot, const Tensor& d_next);

  DecoderBlock& block() { return block_; }
  // The lowest flat offset of this depth's own parameters.
  const Parameter& first_parameter() const { return enorm_.weight(); }

 private:
  struct Activations {
    Tensor tokens;     // (B*T) int32: the ids embedded at each position
    Tensor joined;     // (rows, 2C): [enorm(e) | hnorm(h_prev)]
    Tensor projected;  // (rows, C): eh_proj's output, the block's input
  };
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override {
    ReleaseTensors({&targets_, &djoined_, &dembedded_, &dhidden_});
  }

  int depth_;
  RmsNormLayer enorm_, hnorm_;
  Parameter& eh_proj_;  // (C, 2C)
  DecoderBlock block_;
  RmsNormLayer shared_head_norm_;
  WeightGradients& weight_gradients_;
  EmbeddingLayer embedding_;
  LmHeadLayer head_;
  ActivationSlots<Activations> slots_;
  Tensor targets_;                        // (B*T) int32, read only by the forward
  Tensor djoined_, dembedded_, dhidden_;  // backward scratch
};

}  // namespace tetra

#endif  // TETRA_MODEL_MULTI_TOKEN_PREDICTION_LAYER_H_
