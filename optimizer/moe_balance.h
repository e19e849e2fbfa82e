// A training step's mixture-of-experts balancing around the model's passes
// (DeepSeek-V3's auxiliary-loss-free balancing): the layers' router
// statistics are cleared before the step; after the backward, every layer's
// expert loads are summed over the global batch and the step's statistics
// become metrics; with the optimizer step, the loads move every layer's
// correction bias.
#ifndef TETRA_OPTIMIZER_MOE_BALANCE_H_
#define TETRA_OPTIMIZER_MOE_BALANCE_H_

#include <cstdint>
#include <vector>

#include "model/moe_mlp_layer.h"
#include "parallel/parallel_state.h"

namespace tetra {

struct MoeStepStats {
  double aux_loss = 0;          // the balance term in the objective, summed over layers
  double load_imbalance = 1;    // max over layers of max / mean tokens per expert
  double dropped_tokens = 0;    // pairs dropped over capacity, whole job
  double all_to_all_bytes = 0;  // the largest over ranks
};

struct MoeLoads {
  Tensor summed;  // every layer's tokens per expert over the global batch, packed, int32, on the
                  // layers' device
  MoeStepStats stats;
};

// Clears the layers' statistics (an evaluation may have run since the last step).
void StartMoeStep(const std::vector<MoeMlpLayer*>& layers);

// `layers`: this rank's MoE layers. Loads are summed over the grad group (the
// ranks that routed other tokens through the same layers; tensor-parallel
// ranks see the same ones and count once), statistics over the loss group
// and the pipeline (the stages' other layers), the loads into `buffer`
// (kept by the caller across steps, so a step allocates none; MoeLoads.summed
// shares it). Collective over those groups; global_batch sequences make up
// the step.
MoeLoads SumMoeLoads(const std::vector<MoeMlpLayer*>& layers, int64_t global_batch,
                     const ParallelState& parallel, Tensor* buffer);

// bias_i += speed x sign(mean load - load_i) in every layer: every rank moves
// its biases the same way.
void UpdateMoeBiases(const std::vector<MoeMlpLayer*>& layers, const MoeLoads& loads, double speed);

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_MOE_BALANCE_H_
