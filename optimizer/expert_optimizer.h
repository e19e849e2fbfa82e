// The routed experts' weights live in their own flat buffers
// (ParameterStore): their gradients are summed over the expert-data-parallel
// group (edp: the data-parallel ranks holding the same experts) and, under
// ZeRO-1, their AdamW state is sharded over it, as the dense weights' are
// over the data-parallel group. The global gradient norm adds their squares
// to the dense ones, each expert counted once.
#ifndef TETRA_OPTIMIZER_EXPERT_OPTIMIZER_H_
#define TETRA_OPTIMIZER_EXPERT_OPTIMIZER_H_

#include <memory>

#include "model/parameters.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/gradient_reducer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"

namespace tetra {

// The trainable parameters of the dense (expert = false) or the expert flat
// buffer: a slice held by several tensor-parallel ranks or pipeline stages
// counts once in the global gradient norm.
std::vector<FlatSegment> TrainableSegments(const ParameterStore& store, bool expert);

class ExpertOptimizer {
 public:
  // Null when `store` holds no expert weights. `store` and `parallel` outlive it.
  static std::unique_ptr<ExpertOptimizer> Create(const ParameterStore& store,
                                                 const TrainerConfig& config,
                                                 const ParallelState& parallel);
  ExpertOptimizer(const ParameterStore& store, const TrainerConfig& config,
                  const ParallelState& parallel);

  // Sums the expert gradients over edp (after the backward of the step).
  void Finish() { reducer_.Finish(); }
  // The experts' part of the squared global gradient norm held by this
  // rank's model group position: summed over the experts of ep (and under
  // ZeRO-1 over edp); add the dense part and sum over the model group.
  // Collective over ep (and edp).
  double LocalGradSquaredSum();
  void Clip(double norm) { optimizer_.Clip(norm); }
  void Step(double lr, int step) { optimizer_.Step(lr, step); }
  const DistributedOptimizer& optimizer() const { return optimizer_; }

 private:
  Communicator& ep_;
  GradientReducer reducer_;
  DistributedOptimizer optimizer_;
};

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_EXPERT_OPTIMIZER_H_
