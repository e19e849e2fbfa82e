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

double LlamaModel::ForwardToLoss(int slot, const int32_t* inputs, const int32_t* targets,
                                 int64_t batch, int64_t seq, float grad_scale, bool with_grad) {
  MicroBatch& micro_batch = micro_batches_.ForForward(slot);
  TETRA_CHECK(!micro_batch.awaiting_backward)
      << "forward in activation slot " << slot << " before the backward of its last forward";
  const int64_t rows = batch * seq;
  EnsureShape(&micro_batch.tokens, {rows}, DType::kI32);
  EnsureShape(&targets_, {rows}, DType::kI32);
  std::memcpy(micro_batch.tokens.raw(), inputs, rows * sizeof(int32_t));
  std::memcpy(targets_.raw(), targets, rows * sizeof(int32_t));
  Tensor x = embedding_.Forward(slot, micro_batch.tokens);
  for (auto& block : blocks_) x = block->Forward(slot, x, batch, seq);
  const double loss =
      head_->ForwardLoss(slot, final_norm_->Forward(slot, x), targets_, grad_scale, with_grad);
  micro_batch.awaiting_backward = with_grad;
  return loss;
}

double LlamaModel::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                               int64_t seq) {
  return ForwardToLoss(0, inputs, targets, batch, seq, 0.0f, /*with_grad=*/false);
}

double LlamaModel::Forward(int slot, const int32_t* inputs, const int32_t* targets, int64_t batch,
                           int64_t seq, float grad_scale) {
  return ForwardToLoss(slot, inputs, targets, batch, seq, grad_scale, /*with_grad=*/true);
}

double LlamaModel::ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                   int64_t seq, float grad_scale,
                                   const GradientReadyCallback& on_ready) {
  const double loss = Forward(0, inputs, targets, batch, seq, grad_scale);
  Backward(0, on_ready);
  return loss;
}

void LlamaModel::Backward(int slot, const GradientReadyCallback& on_ready) {
  MicroBatch& micro_batch = micro_batches_.ForBackward(slot);
  TETRA_CHECK(micro_batch.awaiting_backward)
      << "backward in activation slot " << slot << " without a forward with gradients before it";
  micro_batch.awaiting_backward = false;
  auto ready_from = [&](int64_t offset) {
    if (on_ready) on_ready(offset);
  };
  // A tied head writes the embedding's gradient (offset 0) here already; the
  // readiness offsets only ever promise a suffix, which it is not part of.
  Tensor d = final_norm_->Backward(slot, head_->Backward(slot));
  ready_from(final_norm_->weight().flat_offset);
  for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
    d = blocks_[i]->Backward(slot, d);
    ready_from(block_first_parameter_[i]->flat_offset);
  }
  embedding_.Backward(slot, d);
  ready_from(0);
}

void LlamaModel::ReleaseSlots() {
  embedding_.ReleaseSlots();
  for (auto& block : blocks_) block->ReleaseSlots();
  final_norm_->ReleaseSlots();
  head_->ReleaseSlots();
  micro_batches_.Clear();
}

}  // namespace tetra
