// The optimizer of one rank's model, and everything between the model's
// backward and its next forward, in one place (Megatron-Core's
// finalize_model_grads and optimizer step):
//   - StartStep: gradients zeroed, MoE statistics cleared;
//   - GradientsReadyFrom, during the step's last backward: data-parallel
//     buckets whose gradients are final start reducing, overlapped with the
//     rest of the backward;
//   - FinalizeGradients, after the backward: a tied embedding's two stage
//     copies summed over the embedding group (their buckets wait for it), the
//     buckets finished (dense weights over the grad group, routed experts over
//     expert-data), the partial gradients summed over their groups
//     (partial_gradient_sums.h), the MoE loads summed; then the global norm,
//     every parameter counted once;
//   - Step: clip, AdamW (ZeRO-1 sharded or not), the compute copies refreshed,
//     the MoE correction biases moved.
#ifndef TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_
#define TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_

#include <memory>
#include <optional>

#include "model/language_model.h"
#include "optimizer/distributed_optimizer.h"
#include "optimizer/expert_optimizer.h"
#include "optimizer/moe_balance.h"
#include "optimizer/partial_gradient_sums.h"
#include "parallel/gradient_reducer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// What a step's backward leaves for the update.
struct FinalizedGradients {
  double grad_norm = 0;         // the global L2 norm before clipping
  std::optional<MoeLoads> moe;  // models with routed experts
};

class ModelOptimizer {
 public:
  // `model` (packed) and `parallel` outlive it.
  ModelOptimizer(LanguageModel& model, const TrainerConfig& config, const ParallelState& parallel);

  void StartStep();
  // "Every gradient at flat offset >= offset is final" (LanguageModel::
  // GradientReadyCallback), from the step's last backward.
  void GradientsReadyFrom(int64_t offset);
  // Collective over the groups named above.
  FinalizedGradients FinalizeGradients();
  // Clips to optimizer.clip_grad given the norm, one AdamW step at `lr`
  // (`step` counts from 1), then the biases.
  void Step(const FinalizedGradients& gradients, double lr, int64_t step);

  // This rank's bytes of weights, gradients and optimizer state.
  double param_bytes() const;
  double grad_bytes() const;
  double optimizer_bytes() const;

  const DistributedOptimizer& dense() const { return dense_; }
  // The dense gradients' data-parallel reducer: which parts this rank holds summed.
  const GradientReducer& reducer() const { return reducer_; }
  // Null without routed experts.
  const DistributedOptimizer* experts() const {
    return experts_ ? &experts_->optimizer() : nullptr;
  }

 private:
  LanguageModel& model_;
  const ParallelState& parallel_;
  const int64_t global_batch_;
  const double bias_update_speed_;
  GradientReducer reducer_;
  DistributedOptimizer dense_;
  std::unique_ptr<ExpertOptimizer> experts_;
  PartialGradientSums partial_sums_;
  Tensor moe_loads_;  // every MoE layer's summed loads (SumMoeLoads), kept across steps
};

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_
