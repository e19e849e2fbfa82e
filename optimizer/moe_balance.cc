#include "optimizer/moe_balance.h"

#include <algorithm>

#include "core/logging.h"

namespace tetra {

void StartMoeStep(const std::vector<MoeMlpLayer*>& layers) {
  for (MoeMlpLayer* layer : layers) layer->ResetStats();
}

MoeLoads SumMoeLoads(const std::vector<MoeMlpLayer*>& layers, int64_t global_batch,
                     const ParallelState& parallel, Tensor* buffer) {
  // Every layer's int32 loads packed on their device, summed over the grad
  // group in one call, then read on the host. The grad group holds one
  // stage's replicas: without MoE layers, none of its ranks has loads to sum.
  int64_t total = 0;
  for (MoeMlpLayer* layer : layers) total += layer->loads().numel();
  std::vector<int32_t> loads(total);
  MoeLoads result;
  if (!layers.empty()) {
    EnsureShape(buffer, {total}, DType::kI32, layers.front()->loads().device());
    result.summed = *buffer;
    int64_t offset = 0;
    for (MoeMlpLayer* layer : layers) {
      const Tensor& mine = layer->loads();
      result.summed.Slice(offset, offset + mine.numel()).CopyFrom(mine);
      offset += mine.numel();
    }
    parallel.grad().AllReduce(result.summed, result.summed, ReduceOp::kSum);
    Tensor::View(loads.data(), {total}, DType::kI32).CopyFrom(result.summed);
  }
  double aux = 0, dropped = 0, bytes = 0, imbalance = 1;
  size_t at = 0;
  for (MoeMlpLayer* layer : layers) {
    const size_t experts = layer->loads().numel();
    imbalance =
        std::max(imbalance, LoadImbalance({loads.begin() + at, loads.begin() + at + experts}));
    at += experts;
    aux += layer->aux_loss_sum();
    dropped += static_cast<double>(layer->dropped());
    bytes += layer->dispatcher().all_to_all_bytes();
  }
  // Stages hold other layers: their sums add up over the pipeline.
  Communicator &loss = parallel.loss(), &pipeline = parallel.pipeline();
  MoeStepStats& stats = result.stats;
  stats.aux_loss =
      SumOverRanks(pipeline, SumOverRanks(loss, aux)) / static_cast<double>(global_batch);
  stats.dropped_tokens = SumOverRanks(pipeline, SumOverRanks(loss, dropped));
  stats.load_imbalance = MaxOverRanks(pipeline, imbalance);
  stats.all_to_all_bytes = MaxOverRanks(pipeline, MaxOverRanks(loss, bytes));
  return result;
}

void UpdateMoeBiases(const std::vector<MoeMlpLayer*>& layers, const MoeLoads& loads, double speed) {
  int64_t at = 0;
  for (MoeMlpLayer* layer : layers) {
    const int64_t experts = layer->loads().numel();
    TETRA_CHECK(at + experts <= loads.summed.numel())
        << loads.summed.numel() << " summed loads for more MoE layers' experts";
    layer->UpdateBias(loads.summed.Slice(at, at + experts), speed);
    at += experts;
  }
}

}  // namespace tetra
