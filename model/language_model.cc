#include "model/language_model.h"

#include <algorithm>
#include <utility>

#include "kernels/ops.h"
#include "model/model_dims.h"

namespace tetra {

LanguageModel::LanguageModel(const ModelConfig& c, uint64_t seed,
                             const ModelParallelism& parallelism, Storage storage)
    : config_(c), store_(seed, storage), groups_(c, parallelism) {
  AddChunks(parallelism);
  const bool has_embedding = chunks_.front().stage.has_embedding;
  const LayerParallelism& layers = groups_.layers();
  // Registration order is the Hugging Face order: embedding, blocks, norm,
  // (the last stage's table copy,) head, prediction depths; Pack() lays the
  // flat buffers out in it, which BackwardStage's readiness offsets rely on.
  if (has_embedding) embedding_ = std::make_unique<EmbeddingLayer>(store_, c, layers);
  if (c.moe().router_aux_loss_coef() > 0) {
    const int moe_layers = c.num_hidden_layers() - c.moe().first_k_dense_replace();
    router_balance_ = std::make_unique<RouterBalance>(moe_layers, RouterSpecFromConfig(c.moe()),
                                                      c.moe().router_aux_loss_coef());
  }
  for (Chunk& chunk : chunks_) {
    for (int i = 0; i < chunk.stage.num_layers; ++i) {
      const size_t first = store_.all().size();
      auto block = std::make_unique<DecoderBlock>(store_, chunk.stage.first_layer + i, c, layers,
                                                  router_balance_.get());
      if (block->moe() != nullptr) moe_layers_.push_back(block->moe());
      chunk.blocks.push_back(std::move(block));
      chunk.block_first_parameter.push_back(&store_.all()[first]);
    }
  }
  AddHead(has_embedding);
  for (const auto& depth : mtp_) {
    if (depth->block().moe() != nullptr) moe_layers_.push_back(depth->block().moe());
  }
  if (embedding_copy_) embedding_copy_->stage_copies = 2;
  store_.Pack(parallelism.flat_multiple, parallelism.expert_flat_multiple);
}

void LanguageModel::AddChunks(const ModelParallelism& parallelism) {
  const ModelConfig& c = config_;
  TETRA_CHECK(!parallelism.chunks.empty()) << "a model needs at least one chunk";
  int next_layer = 0;
  for (size_t i = 0; i < parallelism.chunks.size(); ++i) {
    PipelineStage stage = parallelism.chunks[i];
    if (stage.num_layers < 0) stage.num_layers = c.num_hidden_layers() - stage.first_layer;
    TETRA_CHECK(stage.first_layer >= next_layer &&
                stage.first_layer + stage.num_layers <= c.num_hidden_layers())
        << "model chunk " << i << " of layers [" << stage.first_layer << ", "
        << stage.first_layer + stage.num_layers << ") overlaps the chunk before it or lies "
        << "outside the model's " << c.num_hidden_layers() << " layers";
    TETRA_CHECK((!stage.has_embedding || i == 0) &&
                (!stage.has_head || i + 1 == parallelism.chunks.size()))
        << "only the first chunk may hold the embedding and only the last the head";
    next_layer = stage.first_layer + stage.num_layers;
    chunks_.emplace_back().stage = stage;
  }
}

void LanguageModel::AddHead(bool has_embedding) {
  const ModelConfig& c = config_;
  const LayerParallelism& layers = groups_.layers();
  // A stage without the embedding needs the table for a tied LM head or for
  // the prediction depths' lookups.
  const bool table_on_last_stage = c.tie_word_embeddings() || c.num_nextn_predict_layers() > 0;
  if (!chunks_.back().stage.has_head) {
    if (table_on_last_stage && has_embedding) embedding_copy_ = &embedding_->weight();
    return;
  }
  final_norm_ = std::make_unique<RmsNormLayer>(store_, "model.norm.weight", c.hidden_size(),
                                               c.rms_norm_eps(), layers);
  // Drawn from the same (seed, name, index) as the first stage's table, so
  // the two copies start equal.
  if (table_on_last_stage && !has_embedding)
    embedding_copy_ = &AddEmbeddingTable(store_, c, layers);
  Parameter* table = has_embedding ? &embedding_->weight() : embedding_copy_;
  Parameter* head_weight = table;
  if (!c.tie_word_embeddings()) {
    head_weight =
        &store_.Add("lm_head.weight", {c.vocab_size(), c.hidden_size()}, Init::kNormal,
                    c.initializer_range(), layers.Vocabulary(PaddedVocabSize(c, layers.tp_size())));
  }
  head_ = std::make_unique<LmHeadLayer>(*head_weight, store_.weight_gradients(), layers);
  for (int depth = 1; depth <= c.num_nextn_predict_layers(); ++depth) {
    mtp_.push_back(std::make_unique<MultiTokenPredictionLayer>(store_, depth, c, *table,
                                                               *head_weight, layers));
  }
}

Tensor LanguageModel::RunForward(int slot, int chunk, const int32_t* inputs,
                                 const Tensor& hidden_in, const int32_t* targets, int64_t batch,
                                 int64_t seq, float grad_scale, bool with_grad, double* loss_sum) {
  TETRA_CHECK(chunk >= 0 && chunk < num_chunks()) << "chunk " << chunk << " of " << num_chunks();
  const Chunk& c = chunks_[chunk];
  MicroBatch& micro_batch = micro_batches_.ForForward(slot);
  TETRA_CHECK(!micro_batch.awaiting_backward && !micro_batch.awaiting_weights)
      << "forward in activation slot " << slot << " before the backward of its last forward";
  const ForwardPass pass = {
      .batch = batch, .seq = seq, .grad_scale = grad_scale, .with_grad = with_grad};
  Tensor x = StageInput(slot, c, micro_batch, inputs, hidden_in, batch * seq);
  x = RunBlocks(slot, c, x, pass);
  micro_batch.awaiting_backward = with_grad;
  if (!c.stage.has_head) return x;
  HeadLoss(slot, x, targets, batch, seq, grad_scale, with_grad, loss_sum);
  return Tensor();
}

Tensor LanguageModel::StageInput(int slot, const Chunk& c, MicroBatch& micro_batch,
                                 const int32_t* inputs, const Tensor& hidden_in, int64_t rows) {
  if (c.stage.has_embedding) {
    TETRA_CHECK(inputs != nullptr) << "the first pipeline stage needs the input tokens";
    CopyTokenIds(inputs, rows, &micro_batch.tokens);
    return embedding_->Forward(slot, micro_batch.tokens);
  }
  TETRA_CHECK(hidden_in.rank() == 2 && hidden_in.dim(1) == config_.hidden_size())
      << "pipeline stage input of shape " << ShapeString(hidden_in.shape()) << ", expected (rows, "
      << config_.hidden_size() << ")";
  // The first block keeps its input for the backward: a copy of its own, so
  // the caller may reuse its buffer (a receive buffer) for the next micro-batch.
  EnsureShape(&micro_batch.hidden_in, hidden_in.shape());
  micro_batch.hidden_in.CopyFrom(hidden_in);
  return micro_batch.hidden_in;
}

Tensor LanguageModel::RunBlocks(int slot, const Chunk& c, Tensor x, const ForwardPass& pass) {
  for (const auto& block : c.blocks) x = block->Forward(slot, x, pass);
  return x;
}

void LanguageModel::HeadLoss(int slot, const Tensor& x, const int32_t* targets, int64_t batch,
                             int64_t seq, float grad_scale, bool with_grad, double* loss_sum) {
  TETRA_CHECK(targets != nullptr && loss_sum != nullptr)
      << "the last pipeline stage needs the targets and somewhere to put the loss";
  CopyTokenIds(targets, batch * seq, &targets_);
  const Tensor& normed = final_norm_->Forward(slot, x);
  *loss_sum = head_->ForwardLoss(slot, normed, targets_, grad_scale, with_grad);
  // Evaluation reports the main loss only: the depths run in training.
  if (!with_grad || mtp_.empty()) return;
  const double depths = static_cast<double>(mtp_.size());
  const float mtp_scale = static_cast<float>(grad_scale * mtp_loss_scaling_factor_);
  const Tensor* h = &normed;
  for (size_t k = 1; k <= mtp_.size(); ++k) {
    const double weight = static_cast<double>(seq) / static_cast<double>(seq - k) / depths;
    double depth_sum = 0;
    h = &mtp_[k - 1]->Forward(slot, *h, targets, batch, seq, grad_scale,
                              static_cast<float>(mtp_scale * weight), &depth_sum);
    mtp_loss_sum_ += weight * depth_sum;
  }
}

Tensor LanguageModel::ForwardStage(int slot, int chunk, const int32_t* inputs,
                                   const Tensor& hidden_in, const int32_t* targets, int64_t batch,
                                   int64_t seq, float grad_scale, double* loss_sum) {
  return RunForward(slot, chunk, inputs, hidden_in, targets, batch, seq, grad_scale,
                    /*with_grad=*/true, loss_sum);
}

Tensor LanguageModel::EvaluateStage(int slot, int chunk, const int32_t* inputs,
                                    const Tensor& hidden_in, const int32_t* targets, int64_t batch,
                                    int64_t seq, double* loss_sum) {
  return RunForward(slot, chunk, inputs, hidden_in, targets, batch, seq, 0.0f, /*with_grad=*/false,
                    loss_sum);
}

Tensor LanguageModel::BackwardStage(int slot, int chunk, const Tensor& d_hidden_out,
                                    const GradientReadyCallback& on_ready) {
  return RunBackward(slot, chunk, d_hidden_out, on_ready, /*split=*/false);
}

Tensor LanguageModel::BackwardInputStage(int slot, int chunk, const Tensor& d_hidden_out) {
  return RunBackward(slot, chunk, d_hidden_out, nullptr, /*split=*/true);
}

void LanguageModel::BackwardWeightStage(int slot, int chunk,
                                        const GradientReadyCallback& on_ready) {
  MicroBatch& micro_batch = micro_batches_.ForBackward(slot);
  TETRA_CHECK(micro_batch.awaiting_weights && micro_batch.weight_chunk == chunk)
      << "weight gradients of chunk " << chunk << " in activation slot " << slot
      << " without the input-gradient half of its backward before them";
  micro_batch.awaiting_weights = false;
  weight_ready_ = on_ready ? &on_ready : nullptr;
  store_.weight_gradients().Run(micro_batch.weight_work);
  weight_ready_ = nullptr;
}

Tensor LanguageModel::RunBackward(int slot, int chunk, const Tensor& d_hidden_out,
                                  const GradientReadyCallback& on_ready, bool split) {
  TETRA_CHECK(chunk >= 0 && chunk < num_chunks()) << "chunk " << chunk << " of " << num_chunks();
  const Chunk& c = chunks_[chunk];
  MicroBatch& micro_batch = micro_batches_.ForBackward(slot);
  TETRA_CHECK(micro_batch.awaiting_backward)
      << "backward in activation slot " << slot << " without a forward with gradients before it";
  TETRA_CHECK(!split || c.recomputed_blocks == 0)
      << "a split backward under full activation recompute: the recomputed blocks share one slot";
  micro_batch.awaiting_backward = false;
  WeightGradients& weight_gradients = store_.weight_gradients();
  // Deferred, each readiness point follows the weight gradients before it.
  auto ready_from = [&](int64_t offset) {
    if (!split) {
      if (on_ready) on_ready(offset);
      return;
    }
    weight_gradients.Add([this, offset] {
      if (weight_ready_ != nullptr) (*weight_ready_)(offset);
    });
  };
  if (split) {
    micro_batch.awaiting_weights = true;
    micro_batch.weight_chunk = chunk;
    weight_gradients.DeferInto(&micro_batch.weight_work);
  }
  const Tensor d_input = RunBlocksBackward(slot, c, d_hidden_out, ready_from);
  weight_gradients.StopDeferring();
  return d_input;
}

Tensor LanguageModel::RunBlocksBackward(int slot, const Chunk& c, const Tensor& d_hidden_out,
                                        const std::function<void(int64_t)>& ready_from) {
  // The first chunk's first registered parameter is at offset 0, so its last
  // call below is ready_from(0). A tied head writes the embedding's gradient
  // (offset 0) here already; the readiness offsets only ever promise a
  // suffix, which it is not part of.
  Tensor d = d_hidden_out;
  if (c.stage.has_head) {
    // The depths, last first: each gives its input's gradient to the one
    // before it, depth 1 to model.norm's output beside the main head's.
    Tensor d_normed;
    for (auto depth = mtp_.rbegin(); depth != mtp_.rend(); ++depth)
      d_normed = (*depth)->Backward(slot, d_normed);
    d = head_->Backward(slot);
    if (d_normed.defined()) ops::Add(d_normed, d);
    d = final_norm_->Backward(slot, d);
    ready_from(final_norm_->weight().flat_offset);
  } else {
    TETRA_CHECK(d.defined()) << "pipeline stage backward without the gradient of its output";
  }
  for (int i = static_cast<int>(c.blocks.size()) - 1; i >= 0; --i) {
    d = c.blocks[i]->Backward(slot, d);
    if (selective_recompute_) c.blocks[i]->ReleaseScratch();
    ready_from(c.block_first_parameter[i]->flat_offset);
  }
  if (!c.stage.has_embedding) return d;
  embedding_->Backward(slot, d);
  ready_from(0);
  return Tensor();
}

void LanguageModel::ReleaseActivations() {
  if (embedding_) embedding_->ReleaseActivations();
  for (Chunk& chunk : chunks_) {
    for (auto& block : chunk.blocks) block->ReleaseActivations();
  }
  if (final_norm_) final_norm_->ReleaseActivations();
  if (head_) head_->ReleaseActivations();
  for (auto& depth : mtp_) depth->ReleaseActivations();
  micro_batches_.Clear();
  recompute_slots_.Clear();
  store_.weight_gradients().ReleaseBuffers();
}

void LanguageModel::set_full_recompute(int layers) {
  for (Chunk& chunk : chunks_) {
    TETRA_CHECK(chunk.recomputed_blocks == 0) << "full activation recompute set twice";
    const int count = static_cast<int>(chunk.blocks.size());
    chunk.recomputed_blocks = layers == 0 ? count : std::min(layers, count);
    for (int i = 0; i < chunk.recomputed_blocks; ++i) {
      chunk.blocks[i] = std::make_unique<RecomputedBlock>(
          std::move(chunk.blocks[i]), i, chunk.recomputed_blocks, recompute_slots_);
    }
  }
}

void LanguageModel::set_selective_recompute() {
  selective_recompute_ = true;
  for (Chunk& chunk : chunks_) {
    for (auto& block : chunk.blocks) block->set_recompute_activation(true);
  }
  for (auto& depth : mtp_) depth->block().set_recompute_activation(true);
}

double LanguageModel::TakeMtpLossSum() {
  const double sum = mtp_loss_sum_;
  mtp_loss_sum_ = 0;
  return sum;
}

std::vector<ModelTensor> WholeModelTensors(const ModelConfig& config) {
  LanguageModel model(config, /*seed=*/0, {}, Storage::kShapesOnly);
  std::vector<ModelTensor> tensors;
  for (const Parameter& p : model.parameters().all()) tensors.push_back({p.name, p.global_shape});
  return tensors;
}

}  // namespace tetra
