// AdamW over a ParameterStore, exactly torch.optim.AdamW (decoupled decay on
// matrices only, bias correction), with global-norm gradient clipping as
// torch.nn.utils.clip_grad_norm_ does it.
#ifndef TETRA_TRAIN_ADAMW_OPTIMIZER_H_
#define TETRA_TRAIN_ADAMW_OPTIMIZER_H_

#include <vector>

#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

class AdamWOptimizer {
 public:
  AdamWOptimizer(ParameterStore& store, const OptimizerConfig& config);

  // L2 norm over every gradient element, each parameter counted once.
  double GradNorm() const;
  // Scales the gradients by clip / (norm + 1e-6) when that is below 1.
  void ClipGradients(double grad_norm) const;
  // One update with learning rate `lr`; `step` is 1-based (bias correction).
  void Step(double lr, int step);

 private:
  ParameterStore& store_;
  OptimizerConfig config_;
  std::vector<Tensor> m_, v_;  // first and second moments, one per parameter
};

}  // namespace tetra

#endif  // TETRA_TRAIN_ADAMW_OPTIMIZER_H_
