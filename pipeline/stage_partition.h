// Stage partition: which decoder layers each virtual pipeline stage holds.
// A pipeline of `pp` ranks with `virtual_stages` (v) model chunks each cuts
// the model into V = pp x v virtual stages; chunk c of pipeline rank r is
// virtual stage c * pp + r (Megatron-LM's interleaved order, as in
// pipeline/schedule.h), and virtual stage s holds a consecutive run of layers
// after those of stage s - 1. The first virtual stage also holds the token
// embedding, the last the final norm, the LM head and the loss.
//
// Layers split evenly by default (num_hidden_layers a multiple of V), or as
// parallel.pipeline_layers lists them, one count per virtual stage in model
// order. A pure function of the numbers: no ranks, no communication.
#ifndef TETRA_PIPELINE_STAGE_PARTITION_H_
#define TETRA_PIPELINE_STAGE_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_parallelism.h"
#include "proto/config.pb.h"

namespace tetra {

// Chunk `chunk` of pipeline rank `pp_rank` in a pipeline of `pp` ranks.
inline int VirtualStageIndex(int pp_rank, int chunk, int pp) { return chunk * pp + pp_rank; }

struct StagePartition {
  int pp = 1;
  int virtual_stages = 1;
  // pp x virtual_stages, indexed by virtual stage (model order): what
  // LanguageModel builds for each (model_parallelism.h).
  std::vector<PipelineStage> stages;

  const PipelineStage& Stage(int pp_rank, int chunk) const {
    return stages[VirtualStageIndex(pp_rank, chunk, pp)];
  }
  // Every chunk of pipeline rank `pp_rank`, in model order: what its
  // LanguageModel holds (ModelParallelism::chunks).
  std::vector<PipelineStage> Chunks(int pp_rank) const {
    std::vector<PipelineStage> chunks;
    for (int c = 0; c < virtual_stages; ++c) chunks.push_back(Stage(pp_rank, c));
    return chunks;
  }
};

// pipeline_layers: empty for an even split, else pp x virtual_stages counts,
// each >= 1, summing to num_hidden_layers. Any other input is a UserError
// (core/user_error.h) naming the numbers.
absl::StatusOr<StagePartition> PartitionStages(int num_hidden_layers, int pp, int virtual_stages,
                                               absl::Span<const int32_t> pipeline_layers = {});

// The same from a run's config (model.num_hidden_layers, parallel.pipeline,
// parallel.virtual_stages, parallel.pipeline_layers).
absl::StatusOr<StagePartition> PartitionStages(const TrainerConfig& config);

}  // namespace tetra

#endif  // TETRA_PIPELINE_STAGE_PARTITION_H_
