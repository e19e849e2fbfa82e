#include "optimizer/expert_optimizer.h"

#include <vector>

namespace tetra {
std::vector<FlatSegment> TrainableSegments(const ParameterStore& store, bool expert) {
  std::vector<FlatSegment> segments;
  for (const Parameter& p : store.all()) {
    if (p.expert != expert || !p.trainable) continue;  // buffers are not updated
    segments.push_back({p.flat_offset, p.value.numel(), p.weight_decay,
                        1.0 / (p.shard.replicas * p.stage_copies)});
  }
  return segments;
}

std::unique_ptr<ExpertOptimizer> ExpertOptimizer::Create(const ParameterStore& store,
                                                         const TrainerConfig& config,
                                                         const ParallelState& parallel) {
  if (store.expert_flat_grads().numel() == 0) return nullptr;
  return std::make_unique<ExpertOptimizer>(store, config, parallel);
}

ExpertOptimizer::ExpertOptimizer(const ParameterStore& store, const TrainerConfig& config,
                                 const ParallelState& parallel)
    : ep_(parallel.expert()),
      reducer_(store.expert_flat_grads(), parallel.expert_data(), config.parallel().dp_bucket_mb(),
               /*reduce_scatter=*/config.optimizer().zero_stage() == 1),
      optimizer_(store.expert_flat_values(), store.expert_flat_compute(),
                 TrainableSegments(store, /*expert=*/true),
                 AdamWSettings::FromConfig(config.optimizer()), reducer_, parallel.model()) {}

double ExpertOptimizer::LocalGradSquaredSum() {
  return SumOverRanks(ep_, optimizer_.LocalGradSquaredSum());
}

}  // namespace tetra
