#include "model/model_parallelism.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "comm/self_communicator.h"
#include "kernels/ops.h"
#include "model/model_dims.h"
#include "parallel/gradient_reducer.h"

namespace tetra {
namespace {

// Slice `index` of `count` along `dim`; a single slice is the whole tensor.
TensorShard Slice(int dim, int index, int count, int replicas) {
  if (count == 1) return TensorShard{.replicas = replicas};
  return TensorShard{.dim = dim, .index = index, .count = count, .replicas = replicas};
}

// This rank's key-value replica group: the tp / kv consecutive TP ranks that
// hold the same head (head index tp_rank * kv / tp).
std::unique_ptr<Communicator> SplitKeyValueReplicas(Communicator& tp, int replicas) {
  const std::string name = tp.name() + "_kv";
  if (replicas == 1) {
    return std::make_unique<SelfCommunicator>(tp.ranks()[tp.rank()], name, tp.timeout_s());
  }
  const int first = tp.rank() / replicas * replicas;
  const std::vector<int> group(tp.ranks().begin() + first, tp.ranks().begin() + first + replicas);
  return tp.Split(group, name);
}

}  // namespace

ModelParallelism ModelParallelism::Of(const ParallelState& state, bool sequence_parallel,
                                      std::vector<PipelineStage> chunks) {
  return {.tp = &state.tensor(),
          .sequence_parallel = sequence_parallel,
          .flat_multiple = GradientReducer::PaddedSize(1, state.grad().size()),
          .chunks = std::move(chunks),
          .ep = &state.expert(),
          .expert_flat_multiple = GradientReducer::PaddedSize(1, state.expert_data().size()),
          .cp = &state.context()};
}

TensorShard LayerParallelism::Column() const { return Slice(0, tp_rank(), tp_size(), 1); }

TensorShard LayerParallelism::Vocabulary(int64_t padded_vocab) const {
  return TensorShard{
      .dim = 0, .index = tp_rank(), .count = tp_size(), .padded_extent = padded_vocab};
}

TensorShard LayerParallelism::Row() const { return Slice(1, tp_rank(), tp_size(), 1); }

TensorShard LayerParallelism::Replicated() const { return TensorShard{.replicas = tp_size()}; }

TensorShard LayerParallelism::KeyValueColumn(int kv_heads) const {
  if (kv_heads >= tp_size()) return Column();
  const int replicas = tp_size() / kv_heads;
  return Slice(0, tp_rank() / replicas, kv_heads, replicas);
}

Communicator& LayerParallelism::context_group() const {
  static SelfCommunicator* const alone = new SelfCommunicator(0, "cp");  // never destroyed
  return cp != nullptr ? *cp : *alone;
}

const LayerParallelism& SingleRankParallelism() {
  static SelfCommunicator* const self = new SelfCommunicator(0, "tp");
  static SelfCommunicator* const self_ep = new SelfCommunicator(0, "ep");
  static const LayerParallelism single{
      .tp = self, .kv_replicas = self, .sequence_parallel = false, .ep = self_ep};
  return single;
}

TensorParallelGroups::TensorParallelGroups(const ModelConfig& config,
                                           const ModelParallelism& parallelism) {
  Communicator* tp = parallelism.tp;
  if (tp == nullptr) {
    own_tp_ = std::make_unique<SelfCommunicator>(0, "tp");
    tp = own_tp_.get();
  }
  Communicator* ep = parallelism.ep;
  if (ep == nullptr) {
    own_ep_ = std::make_unique<SelfCommunicator>(tp->ranks()[tp->rank()], "ep");
    ep = own_ep_.get();
  }
  kv_replicas_ = SplitKeyValueReplicas(*tp, KeyValueReplicas(config, tp->size()));
  layers_ = LayerParallelism{.tp = tp,
                             .kv_replicas = kv_replicas_.get(),
                             .sequence_parallel = parallelism.sequence_parallel,
                             .ep = ep,
                             .cp = parallelism.cp};
}

}  // namespace tetra
