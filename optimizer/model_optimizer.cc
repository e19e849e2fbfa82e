#include "optimizer/model_optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"

#if TETRA_HAVE_CUDA
#include "core/cuda/device.h"
#endif

namespace tetra {

ModelOptimizer::ModelOptimizer(LanguageModel& model, const TrainerConfig& config,
                               const ParallelState& parallel)
    : model_(model),
      parallel_(parallel),
      global_batch_(config.train().global_batch_size()),
      bias_update_speed_(config.model().moe().bias_update_speed()),
      reducer_(model.parameters().flat_grads(), parallel.grad(), config.parallel().dp_bucket_mb(),
               /*reduce_scatter=*/config.optimizer().zero_stage() == 1),
      // The gradient norm sums over the ranks of one model replica (tensor x pipeline).
      dense_(model.parameters().flat_values(), model.parameters().flat_compute(),
             TrainableSegments(model.parameters(), /*expert=*/false),
             AdamWSettings::FromConfig(config.optimizer()), reducer_, parallel.model()),
      experts_(ExpertOptimizer::Create(model.parameters(), config, parallel)),
      partial_sums_(model.parameters(), reducer_.owned_ranges()) {}

void ModelOptimizer::StartStep() {
  model_.parameters().ZeroGrads();
  StartMoeStep(model_.moe_layers());
}

void ModelOptimizer::GradientsReadyFrom(int64_t offset) {
  // Buckets holding an embedding table copy wait until it is summed with the
  // other stage's copy, after the pipeline has drained.
  if (const Parameter* copy = model_.embedding_copy()) {
    offset = std::max(offset, copy->flat_offset + copy->grad.numel());
  }
  reducer_.ReadyFrom(offset);
}

FinalizedGradients ModelOptimizer::FinalizeGradients() {
  if (const Parameter* copy = model_.embedding_copy()) {
    parallel_.embedding().AllReduce(copy->grad, copy->grad, ReduceOp::kSum);
  }
  reducer_.Finish();
  if (experts_) experts_->Finish();
  partial_sums_.Sum();
  // The norm and the MoE sums count as the optimizer's time (the buckets'
  // waits above as data-parallel communication).
  const ScopedSpan span(SpanKind::kOptimizer);
  FinalizedGradients result;
  const std::vector<MoeMlpLayer*> moe_layers = model_.moe_layers();
  // Every stage joins the sums, MoE layers or not.
  if (model_.config().moe().n_routed_experts() > 0)
    result.moe = SumMoeLoads(moe_layers, global_batch_, parallel_, &moe_loads_);
  result.grad_norm =
      experts_ ? std::sqrt(SumOverRanks(parallel_.model(), dense_.LocalGradSquaredSum() +
                                                               experts_->LocalGradSquaredSum()))
               : dense_.GradNorm();
  return result;
}

void ModelOptimizer::Step(const FinalizedGradients& gradients, double lr, int64_t step) {
  dense_.Clip(gradients.grad_norm);
  dense_.Step(lr, step);
  if (experts_) {
    experts_->Clip(gradients.grad_norm);
    experts_->Step(lr, step);
  }
  if (gradients.moe) UpdateMoeBiases(model_.moe_layers(), *gradients.moe, bias_update_speed_);
#if TETRA_HAVE_CUDA
  if (model_.parameters().flat_values().device() == DeviceType::kCUDA)
    cuda::Synchronize();  // the step's kernels count in its time
#endif
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
