// The token embedding (model.embed_tokens), vocabulary-parallel: with the
// table padded to Vp rows (PaddedVocabSize; rows past V are padding no id
// reaches), TP rank r holds rows [r*Vp/tp, (r+1)*Vp/tp), looks up the tokens
// it owns (zero rows for the others) and the partial rows are summed over
// the TP group, ReduceFromTensorParallelRegion, or under sequence
// parallelism ReduceScatterToSequenceParallelRegion so each rank keeps its
// own rows.
#ifndef TETRA_MODEL_EMBEDDING_LAYER_H_
#define TETRA_MODEL_EMBEDDING_LAYER_H_

#include "model/activation_slots.h"
#include "model/layer.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

// Registers this rank's vocabulary-parallel slice of the table,
// model.embed_tokens.weight (also what a tied LM head on another pipeline
// stage holds a copy of).
Parameter& AddEmbeddingTable(ParameterStore& store, const ModelConfig& config,
                             const LayerParallelism& parallelism);

// dst (n) int32 = ids (n, host memory), on the placement's device.
void CopyTokenIds(const int32_t* ids, int64_t n, Tensor* dst);

class EmbeddingLayer : public Layer {
 public:
  EmbeddingLayer(ParameterStore& store, const ModelConfig& config,
                 const LayerParallelism& parallelism = SingleRankParallelism());
  // A second lookup of an already registered `table` (multi-token
  // prediction's), with its own activations; its gradient goes through
  // `weight_gradients` (its store's).
  EmbeddingLayer(Parameter& table, WeightGradients& weight_gradients,
                 const LayerParallelism& parallelism = SingleRankParallelism());
  // tokens (N) int32 ids -> (rows, C) in the residual layout: all N rows, or
  // under SP this rank's N/tp. Keeps `tokens` (the caller's) and the output
  // in `slot` (activation_slots.h).
  Tensor Forward(int slot, const Tensor& tokens);
  // d of the output (residual layout) of the forward of `slot`: accumulates
  // the table gradient.
  void Backward(int slot, const Tensor& dout);

  Parameter& weight() { return weight_; }

 private:
  struct Activations {
    Tensor tokens;
    Tensor out;  // kept by the next layer: (N, C), or under SP (N/tp, C)
  };
  void ClearSlots() override { slots_.Clear(); }
  void ReleaseOwnScratch() override { ReleaseTensors({&lookup_, &dlookup_}); }

  Parameter& weight_;
  WeightGradients& weight_gradients_;
  Communicator& tp_;
  bool sequence_parallel_;
  int64_t vocab_begin_;  // first id of this rank's rows
  ActivationSlots<Activations> slots_;
  Tensor lookup_, dlookup_;  // under SP: (N, C) before the reduce-scatter, its gradient
};

}  // namespace tetra

#endif  // TETRA_MODEL_EMBEDDING_LAYER_H_
