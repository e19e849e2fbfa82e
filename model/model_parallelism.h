// How a model is split over the ranks of a tensor-parallel (TP) group, in
// the way of Megatron-LM: column-parallel q/k/v and gate/up projections
// (output features split, dim 0), row-parallel o_proj and down_proj (input
// features split, dim 1), attention heads split, vocabulary-parallel
// embedding and LM head, replicated norm weights; optionally sequence
// parallelism (SP), which splits the residual stream's token rows over TP
// between the tensor-parallel regions.
//
// Under pipeline parallelism a model holds one stage: a run of decoder
// layers, with the embedding on the first stage and the final norm and LM
// head on the last; with interleaving, several such chunks
// (pipeline/stage_partition.h computes them).
//
// ModelParallelism is what a caller passes to LanguageModel (a trainer makes
// it from its ParallelState with ModelParallelism::Of); TensorParallelGroups
// turns it into the LayerParallelism every layer reads (the groups and the
// shard of each kind of weight).
#ifndef TETRA_MODEL_MODEL_PARALLELISM_H_
#define TETRA_MODEL_MODEL_PARALLELISM_H_

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/parameters.h"
#include "parallel/context_shard.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// The part of the model one pipeline stage holds; the default is all of it.
struct PipelineStage {
  int first_layer = 0;
  int num_layers = -1;  // -1: every layer from first_layer on
  bool has_embedding = true;
  bool has_head = true;  // the final norm, the LM head and the loss
};

struct ModelParallelism {
  Communicator* tp = nullptr;  // the TP group (outlives the model); null: this process alone
  bool sequence_parallel = false;
  // The flat value and gradient buffers are zero-padded to a multiple of this
  // many elements (ParameterStore::Pack), e.g. for equal data-parallel shards.
  int64_t flat_multiple = 1;
  // The chunks this rank holds, in model order: the embedding only on the
  // first, the head only on the last. The default: the whole model.
  std::vector<PipelineStage> chunks = {PipelineStage{}};
  // The expert-parallel group over which MoE layers split their routed
  // experts (outlives the model); null: this process holds every expert.
  Communicator* ep = nullptr;
  // The same for the routed experts' flat buffers (expert-data-parallel shards).
  int64_t expert_flat_multiple = 1;
  // The context-parallel group, over which each sequence is split
  // (parallel/context_shard.h; outlives the model); null: this process alone.
  Communicator* cp = nullptr;

  // A rank's model in a training job: its groups from `state`, which
  // outlives the model, flat buffers padded for the data-parallel shards of
  // its gradients, and `chunks` (pipeline/stage_partition.h says which).
  static ModelParallelism Of(const ParallelState& state, bool sequence_parallel,
                             std::vector<PipelineStage> chunks);
};

struct LayerParallelism {
  Communicator* tp = nullptr;
  // The ranks of tp holding this rank's key-value heads: tp / kv of them when
  // num_key_value_heads < tp, else this rank alone.
  Communicator* kv_replicas = nullptr;
  bool sequence_parallel = false;
  Communicator* ep = nullptr;  // MoE layers' expert-parallel group
  Communicator* cp = nullptr;  // the context-parallel group (attention's ring); null: none

  // cp, or a group of this rank alone.
  Communicator& context_group() const;
  // The tokens of each sequence this rank holds.
  ContextShard context() const {
    return {.size = context_group().size(), .rank = context_group().rank()};
  }
  int tp_rank() const { return tp->rank(); }
  int tp_size() const { return tp->size(); }
  // Weights (out, in) of column-parallel linears: dim 0 split over tp.
  TensorShard Column() const;
  // The embedding table and the LM head (vocab, hidden): dim 0 padded to
  // `padded_vocab` rows (PaddedVocabSize) and split over tp, at tp = 1 too.
  TensorShard Vocabulary(int64_t padded_vocab) const;
  // Weights (out, in) of row-parallel linears: dim 1 split over tp.
  TensorShard Row() const;
  // Held whole by every rank (norm weights).
  TensorShard Replicated() const;
  // k_proj/v_proj (kv_heads x head_dim, hidden): dim 0 split over tp, or
  // when kv_heads < tp the one head tp_rank * kv_heads / tp, which the
  // kv_replicas ranks share.
  TensorShard KeyValueColumn(int kv_heads) const;
};

// One process alone: the layers' default, so single-rank code never names a group.
const LayerParallelism& SingleRankParallelism();

// The groups of one model: the TP and EP groups (SelfCommunicators when
// ModelParallelism's are null) and the key-value replica group, split from
// it when kv < tp (collective over tp: every TP rank builds its model at the
// same point).
class TensorParallelGroups {
 public:
  TensorParallelGroups(const ModelConfig& config, const ModelParallelism& parallelism);
  const LayerParallelism& layers() const { return layers_; }

 private:
  std::unique_ptr<Communicator> own_tp_, own_ep_, kv_replicas_;
  LayerParallelism layers_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_MODEL_PARALLELISM_H_
