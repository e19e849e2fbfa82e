#include "model/llama_model.h"

#include <cstring>

#include "kernels/ops.h"

namespace tetra {
LlamaModel::LlamaModel(const ModelConfig& c, uint64_t seed)
    : config_(c),
      store_(seed),
      embed_tokens_(store_.Add("model.embed_tokens.weight", {c.vocab_size(), c.hidden_size()},
                               Init::kNormal, c.initializer_range())) {
  // Registration order is the Hugging Face order: embedding, blocks, norm, head.
  for (int i = 0; i < c.num_hidden_layers(); ++i) {
    blocks_.push_back(std::make_unique<DecoderBlock>(store_, i, c));
  }
  final_norm_ = std::make_unique<RmsNormLayer>(store_, "model.norm.weight", c.hidden_size(),
                                               c.rms_norm_eps());
  lm_head_ = c.tie_word_embeddings()
                 ? &embed_tokens_
                 : &store_.Add("lm_head.weight", {c.vocab_size(), c.hidden_size()}, Init::kNormal,
                               c.initializer_range());
  store_.Pack();
}

double LlamaModel::ForwardToLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                 int64_t seq, float grad_scale, bool with_grad) {
  const int64_t rows = batch * seq, hidden = config_.hidden_size();
  EnsureShape(&tokens_, {rows}, DType::kI32);
  EnsureShape(&targets_, {rows}, DType::kI32);
  std::memcpy(tokens_.raw(), inputs, rows * sizeof(int32_t));
  std::memcpy(targets_.raw(), targets, rows * sizeof(int32_t));
  EnsureShape(&hidden_, {batch, seq, hidden});
  ops::Embedding(tokens_, embed_tokens_.value, hidden_);
  const Tensor* x = &hidden_;
  for (auto& block : blocks_) x = &block->Forward(*x);
  normed_ = final_norm_->Forward(*x);
  EnsureShape(&logits_, {rows, config_.vocab_size()});
  ops::Linear(normed_, lm_head_->value, logits_);
  // The fused kernel overwrites the logits with their gradient.
  return ops::CrossEntropy(logits_, targets_, grad_scale, with_grad ? logits_ : Tensor());
}

double LlamaModel::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                               int64_t seq) {
  return ForwardToLoss(inputs, targets, batch, seq, 0.0f, /*with_grad=*/false);
}

double LlamaModel::ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                   int64_t seq, float grad_scale) {
  double loss = ForwardToLoss(inputs, targets, batch, seq, grad_scale, /*with_grad=*/true);
  const int64_t hidden = config_.hidden_size();
  EnsureShape(&dnormed_, {batch, seq, hidden});
  // logits = normed . head^T: d normed = dlogits . head, d head += dlogits^T normed.
  ops::LinearBackward(logits_, normed_, lm_head_->value, dnormed_, lm_head_->grad);
  const Tensor* d = &final_norm_->Backward(dnormed_);
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) d = &(*it)->Backward(*d);
  ops::EmbeddingBackward(tokens_, *d, embed_tokens_.grad);
  return loss;
}

}  // namespace tetra
