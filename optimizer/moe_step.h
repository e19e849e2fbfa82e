// A training step's mixture-of-experts bookkeeping around the model's
// forward and backward passes: the layers' router statistics are cleared
// before the step; after the optimizer step every layer's expert loads,
// summed over the global batch, move its correction bias (DeepSeek-V3's
// aux-loss-free balancing), and the statistics become metrics.
#ifndef TETRA_OPTIMIZER_MOE_STEP_H_
#define TETRA_OPTIMIZER_MOE_STEP_H_

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/moe_mlp_layer.h"

namespace tetra {

struct MoeStepStats {
  double aux_loss = 0;        // the balance term in the objective, summed over layers
  double load_imbalance = 1;  // max over layers of max / mean tokens per expert
  double dropped_tokens = 0;  // pairs dropped over capacity, whole job
  double all_to_all_bytes = 0;  // the largest over ranks
};

// Clears the layers' statistics (an evaluation may have run since the last step).
void StartMoeStep(const std::vector<MoeMlpLayer*>& layers);

// `layers`: this pipeline stage's MoE layers. Loads and statistics are summed
// over `dp` (the ranks that routed different tokens; tensor-parallel ranks
// see the same ones and count once), statistics also over `pp` (the stages'
// different layers). Every rank moves its biases the same way. Collective
// over dp and pp; global_batch sequences make up the step.
MoeStepStats FinishMoeStep(const std::vector<MoeMlpLayer*>& layers, double bias_update_speed,
                           int64_t global_batch, Communicator& dp, Communicator& pp);

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_MOE_STEP_H_
