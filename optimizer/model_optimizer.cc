#include "optimizer/model_optimizer.h"

#include <cmath>

namespace tetra {

ModelOptimizer::ModelOptimizer(const ParameterStore& store, const TrainerConfig& config,
                               Distributed& dist)
    : dist_(dist),
      reducer_(store.flat_grads(), *dist.dp, config.parallel().dp_bucket_mb(),
               /*reduce_scatter=*/config.optimizer().zero_stage() == 1),
      // The gradient norm sums over the ranks of one model replica (tensor x pipeline).
      dense_(store.flat_values(), TrainableSegments(store, /*expert=*/false), AdamWSettings::FromConfig(config.optimizer()),
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
