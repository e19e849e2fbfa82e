#include "model/embedding_layer.h"

#include <cstring>

#include "kernels/ops.h"
#include "model/model_dims.h"
#include "parallel/tensor_parallel.h"

namespace tetra {

Parameter& AddEmbeddingTable(ParameterStore& store, const ModelConfig& c,
                             const LayerParallelism& parallelism) {
  return store.Add("model.embed_tokens.weight", {c.vocab_size(), c.hidden_size()}, Init::kNormal,
                   c.initializer_range(),
                   parallelism.Vocabulary(PaddedVocabSize(c, parallelism.tp_size())));
}

void CopyTokenIds(const int32_t* ids, int64_t n, Tensor* dst) {
  EnsureShape(dst, {n}, DType::kI32);
  if (dst->device() == DeviceType::kCPU) {
    std::memcpy(dst->raw(), ids, n * sizeof(int32_t));
    return;
  }
  Tensor host = Tensor::Empty({n}, DType::kI32);
  std::memcpy(host.raw(), ids, n * sizeof(int32_t));
  dst->CopyFrom(host);
}

EmbeddingLayer::EmbeddingLayer(ParameterStore& store, const ModelConfig& c,
                               const LayerParallelism& parallelism)
    : EmbeddingLayer(AddEmbeddingTable(store, c, parallelism), store.weight_gradients(),
                     parallelism) {}

EmbeddingLayer::EmbeddingLayer(Parameter& table, WeightGradients& weight_gradients,
                               const LayerParallelism& parallelism)
    : weight_(table),
      weight_gradients_(weight_gradients),
      tp_(*parallelism.tp),
      sequence_parallel_(parallelism.sequence_parallel),
      vocab_begin_(int64_t{tp_.rank()} * weight_.value.dim(0)) {}

Tensor EmbeddingLayer::Forward(int slot, const Tensor& tokens) {
  Activations& a = slots_.ForForward(slot);
  a.tokens = tokens;
  // Without SP the lookup, summed in place, is the output.
  Tensor& lookup = sequence_parallel_ ? lookup_ : a.out;
  EnsureShape(&lookup, {tokens.numel(), weight_.value.dim(1)});
  // One rank holds the whole table: every id must be in it (checked).
  if (tp_.size() == 1) {
    ops::Embedding(tokens, weight_.compute, lookup);
  } else {
    ops::EmbeddingShard(tokens, weight_.compute, vocab_begin_, lookup);
  }
  if (sequence_parallel_) return ReduceScatterToSequenceParallelRegion(lookup, tp_, &a.out);
  ReduceFromTensorParallelRegion(lookup, tp_);
  return lookup;
}

void EmbeddingLayer::Backward(int slot, const Tensor& dout) {
  const Tensor& tokens = slots_.ForBackward(slot).tokens;
  const Tensor dlookup = sequence_parallel_
                             ? ReduceScatterToSequenceParallelRegionBackward(dout, tp_, &dlookup_)
                             : ReduceFromTensorParallelRegionBackward(dout, tp_);
  // The table's gradient is all of this backward's arithmetic: all W.
  weight_gradients_.Add([=, this, kept = weight_gradients_.Keep(dlookup)] {
    if (tp_.size() == 1) {
      ops::EmbeddingBackward(tokens, kept, weight_.grad);
    } else {
      ops::EmbeddingShardBackward(tokens, kept, vocab_begin_, weight_.grad);
    }
  });
}

}  // namespace tetra
