#include "train/model_optimizer.h"

#include <cmath>

namespace tetra {

std::vector<FlatSegment> DenseSegments(const ParameterStore& store) {
  std::vector<FlatSegment> segments;
  for (const Parameter& p : store.all()) {
    if (!p.trainable || p.expert) continue;  // buffers: untouched; experts: ExpertOptimizer
    segments.push_back({p.flat_offset, p.value.numel(), p.weight_decay,
                        1.0 / (p.shard.replicas * p.stage_copies)});
  }
  return segments;
}

ModelOptimizer::ModelOptimizer(const ParameterStore& store, const TrainerConfig& config,
                               Distributed& dist)
    : dist_(dist),
      reducer_(store.flat_grads(), *dist.dp, config.parallel().dp_bucket_mb(),
               /*reduce_scatter=*/config.optimizer().zero_stage() == 1),
      // The gradient norm sums over the ranks of one model replica (tensor x pipeline).
      dense_(store.flat_values(), DenseSegments(store), AdamWSettings::FromConfig(config.optimizer()),
             reducer_, *dist.mp),
      experts_(ExpertOptimizer::Create(store, config, dist)) {}

void ModelOptimizer::FinishReductions() {
  reducer_.Finish();
  if (experts_) experts_->Finish();
}

double ModelOptimizer::GradNorm() {
  if (!experts_) return dense_.GradNorm();
  return std::sqrt(SumOverRanks(*dist_.mp, dense_.LocalGradSquaredSum() + experts_->LocalGradSquaredSum()));
}

void ModelOptimizer::ClipAndStep(double norm, double lr, int step) {
  dense_.Clip(norm);
  dense_.Step(lr, step);
  if (experts_) {
    experts_->Clip(norm);
    experts_->Step(lr, step);
  }
}

double ModelOptimizer::param_bytes() const {
  return dense_.param_bytes() + (experts_ ? experts_->optimizer().param_bytes() : 0);
}

double ModelOptimizer::grad_bytes() const {
  return dense_.grad_bytes() + (experts_ ? experts_->optimizer().grad_bytes() : 0);
}

double ModelOptimizer::optimizer_bytes() const {
  return dense_.optimizer_bytes() + (experts_ ? experts_->optimizer().optimizer_bytes() : 0);
}

}  // namespace tetra
