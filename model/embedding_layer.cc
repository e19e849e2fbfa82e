#include "model/embedding_layer.h"

#include "kernels/ops.h"
#include "parallel/tensor_parallel.h"

namespace tetra {

EmbeddingLayer::EmbeddingLayer(ParameterStore& store, const ModelConfig& c,
                               const LayerParallelism& parallelism)
    : weight_(store.Add("model.embed_tokens.weight", {c.vocab_size(), c.hidden_size()},
                        Init::kNormal, c.initializer_range(), parallelism.Column())),
      tp_(*parallelism.tp),
      sequence_parallel_(parallelism.sequence_parallel),
      vocab_begin_(int64_t{tp_.rank()} * weight_.value.dim(0)) {}

Tensor EmbeddingLayer::Forward(const Tensor& tokens) {
  tokens_ = tokens;
  EnsureShape(&lookup_, {tokens.numel(), weight_.value.dim(1)});
  // One rank holds the whole table: every id must be in it (checked).
  if (tp_.size() == 1) {
    ops::Embedding(tokens, weight_.value, lookup_);
  } else {
    ops::EmbeddingShard(tokens, weight_.value, vocab_begin_, lookup_);
  }
  if (sequence_parallel_) return ReduceScatterToSequenceParallelRegion(lookup_, tp_, &out_);
  ReduceFromTensorParallelRegion(lookup_, tp_);
  return lookup_;
}

void EmbeddingLayer::Backward(const Tensor& dout) {
  const Tensor dlookup =
      sequence_parallel_ ? ReduceScatterToSequenceParallelRegionBackward(dout, tp_, &dlookup_)
                         : ReduceFromTensorParallelRegionBackward(dout, tp_);
  if (tp_.size() == 1) {
    ops::EmbeddingBackward(tokens_, dlookup, weight_.grad);
  } else {
    ops::EmbeddingShardBackward(tokens_, dlookup, vocab_begin_, weight_.grad);
  }
}

}  // namespace tetra
