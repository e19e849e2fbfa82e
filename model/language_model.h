// A decoder-only causal language model, dense (LlamaForCausalLM) or mixture
// of experts (DeepSeek-V3's MoE MLPs after the first first_k_dense_replace
// layers): token embedding, N decoder blocks, final RMSNorm, LM head (tied to
// the embedding when tie_word_embeddings), the token cross-entropy, and
// optionally multi-token prediction.
// Parameters carry Hugging Face names.
//
// Tensor-parallel when given a TP group (model_parallelism.h): every rank of
// the group builds the model with the same config and seed, holds its shard
// of each weight (drawn as that slice of the global tensor), runs the same
// inputs and returns the same loss; each gradient is that of its shard of the
// single-rank model once the partial sums are added (Parameter::grad_partial_over).
//
// A rank builds only its own model chunks (ModelParallelism::chunks: the
// whole model, one pipeline stage, or with interleaving several virtual
// stages), with their global names. ForwardStage / BackwardStage run one
// micro-batch through one chunk, taking the previous virtual stage's hidden
// states and giving back their gradient; the pipeline executor
// (pipeline/executor.h) drives them, also for the whole model, which is a
// one-stage pipeline. With tied embeddings or multi-token prediction split
// over stages, the last stage holds its own copy of the table, for the LM
// head or the prediction depths' lookups (embedding_copy()).
//
// With model.num_nextn_predict_layers D > 0 the last stage also runs the D
// multi-token prediction depths (multi_token_prediction_layer.h) after the
// main LM head, in training (evaluation reports the main loss only): the
// objective adds mtp_loss_scaling_factor / D times each depth's mean token
// cross-entropy over the global batch, its B x (T - k) valid tokens at
// depth k (the main loss's grad_scale x T / (T - k) per token).
#ifndef TETRA_MODEL_LANGUAGE_MODEL_H_
#define TETRA_MODEL_LANGUAGE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/activation_slots.h"
#include "model/decoder_block.h"
#include "model/embedding_layer.h"
#include "model/lm_head_layer.h"
#include "model/model_parallelism.h"
#include "model/multi_token_prediction_layer.h"
#include "model/parameters.h"
#include "model/recomputed_block.h"
#include "model/rmsnorm_layer.h"
#include "proto/config.pb.h"

namespace tetra {

class LanguageModel {
 public:
  // Called during a backward with X whenever every parameter at flat offset
  // >= X has received its last gradient contribution of this backward (so
  // data-parallel reduction of that suffix of the flat gradient buffer can
  // start). X decreases call to call; the first chunk's last call has X = 0.
  using GradientReadyCallback = std::function<void(int64_t first_ready_flat_offset)>;

  // Initialises every parameter from (seed, name, element index). With a TP
  // group this is collective over it (it may split a key-value replica group).
  // Storage::kShapesOnly describes the model without allocating its weights
  // (it cannot run).
  LanguageModel(const ModelConfig& config, uint64_t seed, const ModelParallelism& parallelism = {},
                Storage storage = Storage::kAllocated);

  // One micro-batch through chunk `chunk` in activation slot `slot`
  // (activation_slots.h): a schedule (1F1B) runs the forwards of several
  // micro-batches before their backwards, each in its own slot, which holds
  // what its backward needs; slots are shared by the chunks (a micro-batch in
  // flight on two chunks takes two), and a slot takes a new forward only
  // after the backward of its last one. The first stage (has_embedding) reads
  // `inputs` (B, T) token ids, any other `hidden_in`, the previous stage's
  // output (rows, C) in the residual layout (rows = B*T, or B*T/tp under
  // sequence parallelism), copied so the caller may reuse it. Returns this
  // stage's output (rows, C), valid until the next forward in `slot`; the
  // last stage (has_head) instead reads `targets` (B, T), stores the sum of
  // the B*T token cross-entropies in *loss_sum and returns an empty tensor.
  // grad_scale is what the backward will scale that sum's gradient by, given
  // here because the fused cross-entropy writes the logit gradients in the
  // forward.
  Tensor ForwardStage(int slot, int chunk, const int32_t* inputs, const Tensor& hidden_in,
                      const int32_t* targets, int64_t batch, int64_t seq, float grad_scale,
                      double* loss_sum);
  // ForwardStage without gradients (evaluation): the slot awaits no backward.
  Tensor EvaluateStage(int slot, int chunk, const int32_t* inputs, const Tensor& hidden_in,
                       const int32_t* targets, int64_t batch, int64_t seq, double* loss_sum);
  // The backward of `slot`'s ForwardStage on `chunk`: d_hidden_out (rows, C)
  // is the gradient of the chunk's output (ignored by the last stage, which
  // starts from its loss). Accumulates the parameter gradients and returns
  // d hidden_in (rows, C), valid until the next BackwardStage; empty on the
  // first stage. on_ready is called (GradientReadyCallback) with offsets
  // inside this chunk and the chunks before it: pass it only to a backward
  // after which the later chunks receive no more gradient.
  Tensor BackwardStage(int slot, int chunk, const Tensor& d_hidden_out,
                       const GradientReadyCallback& on_ready = nullptr);
  // BackwardStage split in two (zero-bubble schedules: pipeline/schedule.h):
  // BackwardInputStage, B, returns d hidden_in as BackwardStage does and
  // keeps every weight-gradient computation in the slot (kernels/
  // weight_gradients.h); BackwardWeightStage, W, runs them in order, calling
  // on_ready as BackwardStage would, and frees the slot for a new forward.
  // The gradients are bit-identical to BackwardStage's. Not under full
  // activation recompute (its blocks share one slot: checked).
  Tensor BackwardInputStage(int slot, int chunk, const Tensor& d_hidden_out);
  void BackwardWeightStage(int slot, int chunk, const GradientReadyCallback& on_ready = nullptr);

  // Slots holding activations: one more than the highest used since the last
  // release.
  int num_slots() const { return micro_batches_.size(); }
  // Frees the activations of every slot and the layers' scratch, forgetting
  // any forward whose backward has not run.
  void ReleaseActivations();

  ParameterStore& parameters() { return store_; }
  // The mixture-of-experts MLPs of this stage's blocks, in layer order.
  const std::vector<MoeMlpLayer*>& moe_layers() const { return moe_layers_; }
  const ModelConfig& config() const { return config_; }
  const LayerParallelism& parallelism() const { return groups_.layers(); }
  // The chunks this model holds, in model order (num_layers resolved).
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const PipelineStage& chunk(int c) const { return chunks_[c].stage; }
  // The embedding table when this rank holds only some of its uses (the
  // embedding on the first stage; a tied LM head or the multi-token
  // prediction depths on the last): the two stages' copies start equal and
  // stay equal when their gradients are summed over the embedding group
  // before the update. Null otherwise.
  Parameter* embedding_copy() const { return embedding_copy_; }
  // The multi-token prediction loss of the forwards with gradients since the
  // last call, on this rank: the sum over micro-batches of (1 / D) x the
  // sum over depths k of the depth's token cross-entropy sum x T / (T - k),
  // so that over the global batch's token count it is the mean over depths
  // of each depth's mean. Resets it.
  double TakeMtpLossSum();
  // train.mtp_loss_scaling_factor, the weight of the prediction depths' mean
  // loss in the objective (the trainer sets the run's).
  void set_mtp_loss_scaling_factor(double factor) { mtp_loss_scaling_factor_ = factor; }
  // Full activation recompute (train.recompute FULL) of the first `layers`
  // decoder blocks of each chunk (0: all), each wrapped in a RecomputedBlock
  // (recomputed_block.h): one set of activations whatever the micro-batches
  // in flight, only its input kept per slot, and bit-identical gradients.
  // Once, before the first forward.
  void set_full_recompute(int layers);
  // Selective activation recompute (train.recompute SELECTIVE): every
  // block's MLP (dense, shared and routed experts) keeps gate and up but not
  // their SwiGLU activation, which its backward computes again (the same op:
  // bit-identical gradients), the prediction depths' blocks included; and
  // each block hands back its scratch after its backward, so the blocks'
  // backwards take one block's scratch at a time, not one per block.
  void set_selective_recompute();

 private:
  struct MicroBatch {
    Tensor tokens;     // (B*T) inputs, kept for the embedding's backward (first stage)
    Tensor hidden_in;  // (rows, C) the stage's input, kept for the first block's backward
    bool awaiting_backward = false;
    // A split backward's W, kept by its B (BackwardInputStage).
    WeightGradients::Deferred weight_work;
    bool awaiting_weights = false;
    int weight_chunk = -1;
  };

  struct Chunk {
    PipelineStage stage;
    // Its decoder blocks, under full recompute the first ones RecomputedBlocks.
    std::vector<std::unique_ptr<Sublayer>> blocks;
    std::vector<const Parameter*> block_first_parameter;  // the lowest flat offset of each block
    int recomputed_blocks = 0;
  };

  // BackwardStage, or with `split` its B half (the W half kept in the slot).
  Tensor RunBackward(int slot, int chunk, const Tensor& d_hidden_out,
                     const GradientReadyCallback& on_ready, bool split);
  // The layers' backward of chunk `c` from d_hidden_out, calling ready_from
  // at each readiness point (GradientReadyCallback).
  Tensor RunBlocksBackward(int slot, const Chunk& c, const Tensor& d_hidden_out,
                           const std::function<void(int64_t)>& ready_from);
  // ForwardStage; when !with_grad (EvaluateStage) the slot awaits no backward.
  Tensor RunForward(int slot, int chunk, const int32_t* inputs, const Tensor& hidden_in,
                    const int32_t* targets, int64_t batch, int64_t seq, float grad_scale,
                    bool with_grad, double* loss_sum);
  // The chunk's input: the embedding of `inputs` on the first stage, else a
  // copy of hidden_in the first block keeps for the backward.
  Tensor StageInput(int slot, const Chunk& c, MicroBatch& micro_batch, const int32_t* inputs,
                    const Tensor& hidden_in, int64_t rows);
  // The chunk's blocks on x.
  Tensor RunBlocks(int slot, const Chunk& c, Tensor x, const ForwardPass& pass);
  // The last stage: the final norm, the LM head's loss into *loss_sum and, in
  // training, the multi-token prediction depths.
  void HeadLoss(int slot, const Tensor& x, const int32_t* targets, int64_t batch, int64_t seq,
                float grad_scale, bool with_grad, double* loss_sum);
  // The constructor's parts: the chunks' stages, checked, and the last
  // stage's final norm, LM head and prediction depths.
  void AddChunks(const ModelParallelism& parallelism);
  void AddHead(bool has_embedding);

  ModelConfig config_;
  ParameterStore store_;
  TensorParallelGroups groups_;
  std::vector<Chunk> chunks_;
  std::unique_ptr<EmbeddingLayer> embedding_;  // first stage only (chunk 0)
  std::unique_ptr<RmsNormLayer> final_norm_;   // last stage only (last chunk), as head_
  std::unique_ptr<LmHeadLayer> head_;
  // transformers' balance loss over all MoE layers (model.moe.router_aux_loss_coef), or null.
  std::unique_ptr<RouterBalance> router_balance_;
  std::vector<std::unique_ptr<MultiTokenPredictionLayer>> mtp_;  // last stage only, depth 1 first
  Parameter* embedding_copy_ = nullptr;
  double mtp_loss_sum_ = 0;
  double mtp_loss_scaling_factor_ = TrainConfig::default_instance().mtp_loss_scaling_factor();
  bool selective_recompute_ = false;
  ActivationSlots<MicroBatch> micro_batches_;
  RecomputeSlots recompute_slots_;  // full recompute's, slot by slot as micro_batches_
  std::vector<MoeMlpLayer*>
      moe_layers_;  // the blocks', then the prediction depths', in layer order
  // BackwardWeightStage's on_ready, for the readiness points its B kept.
  const GradientReadyCallback* weight_ready_ = nullptr;
  Tensor targets_;  // (B*T), read only by the forward
};

// A tensor of the whole model by its Hugging Face name and global shape.
struct ModelTensor {
  std::string name;
  Shape shape;
};

// Every tensor of the whole model `config` describes (every layer, every
// routed expert, buffers included), in registration order: what a weights
// file for it holds. Built shapes-only, so it costs no weight memory.
std::vector<ModelTensor> WholeModelTensors(const ModelConfig& config);

}  // namespace tetra

#endif  // TETRA_MODEL_LANGUAGE_MODEL_H_
