#include "model/llama_model.h"

#include <cstring>

namespace tetra {
namespace {

// dst (n) = ids (n, host memory), on the placement's device.
void CopyTokens(const int32_t* ids, int64_t n, Tensor* dst) {
  EnsureShape(dst, {n}, DType::kI32);
  if (dst->device() == DeviceType::kCPU) {
    std::memcpy(dst->raw(), ids, n * sizeof(int32_t));
    return;
  }
  Tensor host = Tensor::Empty({n}, DType::kI32);
  std::memcpy(host.raw(), ids, n * sizeof(int32_t));
  dst->CopyFrom(host);
}

}  // namespace
LlamaModel::LlamaModel(const ModelConfig& c, uint64_t seed, const ModelParallelism& parallelism)
    : config_(c), stage_(parallelism.stage), store_(seed), groups_(c, parallelism) {
  if (stage_.num_layers < 0) stage_.num_layers = c.num_hidden_layers() - stage_.first_layer;
  TETRA_CHECK(stage_.first_layer >= 0 &&
              stage_.first_layer + stage_.num_layers <= c.num_hidden_layers())
      << "pipeline stage of layers [" << stage_.first_layer << ", "
      << stage_.first_layer + stage_.num_layers << ") outside the model's "
      << c.num_hidden_layers() << " layers";
  // A tied head on another stage than the embedding would need the two
  // stages' copies of the table kept equal (Megatron-LM all-reduces their
  // gradients); not supported yet.
  TETRA_CHECK(!c.tie_word_embeddings() || (stage_.has_embedding && stage_.has_head))
      << "tie_word_embeddings with the embedding and the LM head on different pipeline "
         "stages is not supported";
  const LayerParallelism& layers = groups_.layers();
  // Registration order is the Hugging Face order: embedding, blocks, norm,
  // head; Pack() lays the flat buffers out in it, which BackwardStage's
  // readiness offsets rely on.
  if (stage_.has_embedding) embedding_ = std::make_unique<EmbeddingLayer>(store_, c, layers);
  for (int i = 0; i < stage_.num_layers; ++i) {
    const size_t first = store_.all().size();
    blocks_.push_back(std::make_unique<DecoderBlock>(store_, stage_.first_layer + i, c, layers));
    block_first_parameter_.push_back(&store_.all()[first]);
  }
  if (stage_.has_head) {
    final_norm_ = std::make_unique<RmsNormLayer>(store_, "model.norm.weight", c.hidden_size(),
                                                 c.rms_norm_eps(), layers);
    Parameter& head_weight =
        c.tie_word_embeddings()
            ? embedding_->weight()
            : store_.Add("lm_head.weight", {c.vocab_size(), c.hidden_size()}, Init::kNormal,
                         c.initializer_range(), layers.Column());
    head_ = std::make_unique<LmHeadLayer>(head_weight, layers);
  }
  store_.Pack(parallelism.flat_multiple);
}

bool LlamaModel::is_whole_model() const {
  return stage_.has_embedding && stage_.has_head &&
         stage_.num_layers == config_.num_hidden_layers();
}

Tensor LlamaModel::RunForward(int slot, const int32_t* inputs, const Tensor& hidden_in,
                              const int32_t* targets, int64_t batch, int64_t seq,
                              float grad_scale, bool with_grad, double* loss_sum) {
  MicroBatch& micro_batch = micro_batches_.ForForward(slot);
  TETRA_CHECK(!micro_batch.awaiting_backward)
      << "forward in activation slot " << slot << " before the backward of its last forward";
  const int64_t rows = batch * seq;
  Tensor x;
  if (stage_.has_embedding) {
    TETRA_CHECK(inputs != nullptr) << "the first pipeline stage needs the input tokens";
    CopyTokens(inputs, rows, &micro_batch.tokens);
    x = embedding_->Forward(slot, micro_batch.tokens);
  } else {
    TETRA_CHECK(hidden_in.rank() == 2 && hidden_in.dim(1) == config_.hidden_size())
        << "pipeline stage input of shape " << ShapeString(hidden_in.shape())
        << ", expected (rows, " << config_.hidden_size() << ")";
    // The first block keeps its input for the backward: a copy of its own, so
    // the caller may reuse its buffer (a receive buffer) for the next micro-batch.
    EnsureShape(&micro_batch.hidden_in, hidden_in.shape());
    micro_batch.hidden_in.CopyFrom(hidden_in);
    x = micro_batch.hidden_in;
  }
  for (auto& block : blocks_) x = block->Forward(slot, x, batch, seq);
  micro_batch.awaiting_backward = with_grad;
  if (!stage_.has_head) return x;
  TETRA_CHECK(targets != nullptr && loss_sum != nullptr)
      << "the last pipeline stage needs the targets and somewhere to put the loss";
  CopyTokens(targets, rows, &targets_);
  *loss_sum =
      head_->ForwardLoss(slot, final_norm_->Forward(slot, x), targets_, grad_scale, with_grad);
  return Tensor();
}

Tensor LlamaModel::ForwardStage(int slot, const int32_t* inputs, const Tensor& hidden_in,
                                const int32_t* targets, int64_t batch, int64_t seq,
                                float grad_scale, double* loss_sum) {
  return RunForward(slot, inputs, hidden_in, targets, batch, seq, grad_scale, /*with_grad=*/true,
                    loss_sum);
}

double LlamaModel::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                               int64_t seq) {
  TETRA_CHECK(is_whole_model()) << "ForwardLoss runs the whole model, not a pipeline stage";
  double loss = 0;
  RunForward(0, inputs, Tensor(), targets, batch, seq, 0.0f, /*with_grad=*/false, &loss);
  return loss;
}

double LlamaModel::Forward(int slot, const int32_t* inputs, const int32_t* targets, int64_t batch,
                           int64_t seq, float grad_scale) {
  TETRA_CHECK(is_whole_model()) << "Forward runs the whole model; a pipeline stage: ForwardStage";
  double loss = 0;
  ForwardStage(slot, inputs, Tensor(), targets, batch, seq, grad_scale, &loss);
  return loss;
}

double LlamaModel::ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                   int64_t seq, float grad_scale,
                                   const GradientReadyCallback& on_ready) {
  const double loss = Forward(0, inputs, targets, batch, seq, grad_scale);
  Backward(0, on_ready);
  return loss;
}

void LlamaModel::Backward(int slot, const GradientReadyCallback& on_ready) {
  TETRA_CHECK(is_whole_model()) << "Backward runs the whole model; a pipeline stage: BackwardStage";
  BackwardStage(slot, Tensor(), on_ready);
}

Tensor LlamaModel::BackwardStage(int slot, const Tensor& d_hidden_out,
                                 const GradientReadyCallback& on_ready) {
  MicroBatch& micro_batch = micro_batches_.ForBackward(slot);
  TETRA_CHECK(micro_batch.awaiting_backward)
      << "backward in activation slot " << slot << " without a forward with gradients before it";
  micro_batch.awaiting_backward = false;
  auto ready_from = [&](int64_t offset) {
    if (on_ready) on_ready(offset);
  };
  // The stage's first registered parameter is at offset 0, so the last call
  // below is ready_from(0). A tied head writes the embedding's gradient
  // (offset 0) here already; the readiness offsets only ever promise a
  // suffix, which it is not part of.
  Tensor d = d_hidden_out;
  if (stage_.has_head) {
    d = final_norm_->Backward(slot, head_->Backward(slot));
    ready_from(final_norm_->weight().flat_offset);
  } else {
    TETRA_CHECK(d.defined()) << "pipeline stage backward without the gradient of its output";
  }
  for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
    d = blocks_[i]->Backward(slot, d);
    ready_from(block_first_parameter_[i]->flat_offset);
  }
  if (!stage_.has_embedding) return d;
  embedding_->Backward(slot, d);
  ready_from(0);
  return Tensor();
}

void LlamaModel::ReleaseSlots() {
  if (embedding_) embedding_->ReleaseSlots();
  for (auto& block : blocks_) block->ReleaseSlots();
  if (final_norm_) final_norm_->ReleaseSlots();
  if (head_) head_->ReleaseSlots();
  micro_batches_.Clear();
}

}  // namespace tetra
