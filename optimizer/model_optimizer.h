// The optimizer of one rank's model: the dense weights' data-parallel
// gradient reducer and (ZeRO-1-sharded) AdamW, and the routed experts' own
// (optimizer/expert_optimizer.h) when the model has them, behind one interface:
// finish the gradient reductions, the global gradient norm (every parameter
// counted once), clip, step, and the memory they hold.
#ifndef TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_
#define TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_

#include <memory>
#include <vector>

#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/gradient_reducer.h"
#include "proto/config.pb.h"
#include "parallel/parallel_state.h"
#include "optimizer/expert_optimizer.h"

namespace tetra {

class ModelOptimizer {
 public:
  // `store` (packed) and `dist` outlive it.
  ModelOptimizer(const ParameterStore& store, const TrainerConfig& config, Distributed& dist);

  // The dense gradients' reducer, told during the last backward which
  // offsets are final (LlamaModel::GradientReadyCallback).
  GradientReducer& reducer() { return reducer_; }
  // Completes every gradient reduction of the step (dense and expert).
  void FinishReductions();
  // The global L2 norm of all gradients before clipping (collective over the
  // model group, and ep, dp, edp as the shards need).
  double GradNorm();
  // Clips to optimizer.clip_grad given the norm, then one AdamW step at `lr`.
  void ClipAndStep(double norm, double lr, int step);

  // This rank's bytes of weights, gradients and optimizer state.
  double param_bytes() const;
  double grad_bytes() const;
  double optimizer_bytes() const;

  DistributedOptimizer& dense() { return dense_; }
  // Null without routed experts.
  const DistributedOptimizer* experts() const { return experts_ ? &experts_->optimizer() : nullptr; }

 private:
  Distributed& dist_;
  GradientReducer reducer_;
  DistributedOptimizer dense_;
  std::unique_ptr<ExpertOptimizer> experts_;
};

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_MODEL_OPTIMIZER_H_
