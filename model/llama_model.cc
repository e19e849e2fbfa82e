#include "model/llama_model.h"

#include <cstring>

namespace tetra {
LlamaModel::LlamaModel(const ModelConfig& c, uint64_t seed, const ModelParallelism& parallelism)
    : config_(c),
      store_(seed),
      groups_(c, parallelism),
      embedding_(store_, c, groups_.layers()) {
  const LayerParallelism& layers = groups_.layers();
  // Registration order is the Hugging Face order: embedding, blocks, norm,
  // head; Pack() lays the flat buffers out in it, which ForwardBackward's
  // readiness offsets rely on.
  for (int i = 0; i < c.num_hidden_layers(); ++i) {
    const size_t first = store_.all().size();
    blocks_.push_back(std::make_unique<DecoderBlock>(store_, i, c, layers));
    block_first_parameter_.push_back(&store_.all()[first]);
  }
  final_norm_ = std::make_unique<RmsNormLayer>(store_, "model.norm.weight", c.hidden_size(),
                                               c.rms_norm_eps(), layers);
  Parameter& head_weight =
      c.tie_word_embeddings()
          ? embedding_.weight()
          : store_.Add("lm_head.weight", {c.vocab_size(), c.hidden_size()}, Init::kNormal,
                       c.initializer_range(), layers.Column());
  head_ = std::make_unique<LmHeadLayer>(head_weight, layers);
  store_.Pack(parallelism.flat_multiple);
}

double LlamaModel::ForwardToLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                 int64_t seq, float grad_scale, bool with_grad) {
  const int64_t rows = batch * seq;
  EnsureShape(&tokens_, {rows}, DType::kI32);
  EnsureShape(&targets_, {rows}, DType::kI32);
  std::memcpy(tokens_.raw(), inputs, rows * sizeof(int32_t));
  std::memcpy(targets_.raw(), targets, rows * sizeof(int32_t));
  Tensor x = embedding_.Forward(tokens_);
  for (auto& block : blocks_) x = block->Forward(x, batch, seq);
  return head_->ForwardLoss(final_norm_->Forward(x), targets_, grad_scale, with_grad);
}

double LlamaModel::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                               int64_t seq) {
  return ForwardToLoss(inputs, targets, batch, seq, 0.0f, /*with_grad=*/false);
}

double LlamaModel::ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                   int64_t seq, float grad_scale,
                                   const GradientReadyCallback& on_ready) {
  const double loss = ForwardToLoss(inputs, targets, batch, seq, grad_scale, /*with_grad=*/true);
  auto ready_from = [&](int64_t offset) {
    if (on_ready) on_ready(offset);
  };
  // A tied head writes the embedding's gradient (offset 0) here already; the
  // readiness offsets only ever promise a suffix, which it is not part of.
  Tensor d = final_norm_->Backward(head_->Backward());
  ready_from(final_norm_->weight().flat_offset);
  for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
    d = blocks_[i]->Backward(d);
    ready_from(block_first_parameter_[i]->flat_offset);
  }
  embedding_.Backward(d);
  ready_from(0);
  return loss;
}

}  // namespace tetra
