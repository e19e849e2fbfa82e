#include "optimizer/moe_step.h"

#include <algorithm>

namespace tetra {

void StartMoeStep(const std::vector<MoeMlpLayer*>& layers) {
  for (MoeMlpLayer* layer : layers) layer->ResetStats();
}

MoeStepStats FinishMoeStep(const std::vector<MoeMlpLayer*>& layers, double bias_update_speed,
                           int64_t global_batch, Communicator& dp, Communicator& pp) {
  // Every layer's loads in one int32 buffer, summed over dp in one call.
  std::vector<int32_t> loads;
  for (MoeMlpLayer* layer : layers) loads.insert(loads.end(), layer->loads().begin(), layer->loads().end());
  dp.AllReduce(loads.data(), loads.data(), static_cast<int64_t>(loads.size()), DType::kI32,
               ReduceOp::kSum);
  MoeStepStats stats;
  double aux = 0, dropped = 0, bytes = 0, imbalance = 1;
  size_t at = 0;
  for (MoeMlpLayer* layer : layers) {
    const std::vector<int64_t> global(loads.begin() + at, loads.begin() + at + layer->loads().size());
    at += global.size();
    layer->UpdateBias(global, bias_update_speed);
    imbalance = std::max(imbalance, LoadImbalance(global));
    aux += layer->aux_loss_sum();
    dropped += static_cast<double>(layer->dropped());
    bytes += layer->dispatcher().all_to_all_bytes();
  }
  stats.aux_loss = SumOverRanks(pp, SumOverRanks(dp, aux)) / static_cast<double>(global_batch);
  stats.dropped_tokens = SumOverRanks(pp, SumOverRanks(dp, dropped));
  stats.load_imbalance = MaxOverRanks(pp, imbalance);
  stats.all_to_all_bytes = MaxOverRanks(pp, MaxOverRanks(dp, bytes));
  return stats;
}

}  // namespace tetra
