// The token embedding (model.embed_tokens), vocabulary-parallel: TP rank r
// holds rows [r*V/tp, (r+1)*V/tp) of the table, looks up the tokens it owns
// (zero rows for the others) and the partial rows are summed over the TP
// group, ReduceFromTensorParallelRegion, or under sequence parallelism
// ReduceScatterToSequenceParallelRegion so each rank keeps its own rows.
#ifndef TETRA_MODEL_EMBEDDING_LAYER_H_
#define TETRA_MODEL_EMBEDDING_LAYER_H_

#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

class EmbeddingLayer {
 public:
  EmbeddingLayer(ParameterStore& store, const ModelConfig& config,
                 const LayerParallelism& parallelism = SingleRankParallelism());
  // tokens (N) int32 ids -> (rows, C) in the residual layout: all N rows, or
  // under SP this rank's N/tp. Keeps `tokens` (the caller's) for Backward.
  Tensor Forward(const Tensor& tokens);
  // d of the output (residual layout): accumulates the table gradient.
  void Backward(const Tensor& dout);

  Parameter& weight() { return weight_; }

 private:
  Parameter& weight_;
  Communicator& tp_;
  bool sequence_parallel_;
  int64_t vocab_begin_;  // first id of this rank's rows
  Tensor tokens_, lookup_, out_, dlookup_;  // lookup_ (N, C), out_ (N/tp, C) under SP
};

}  // namespace tetra

#endif  // TETRA_MODEL_EMBEDDING_LAYER_H_
