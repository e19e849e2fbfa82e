// Stage partition: which decoder layers each virtual pipeline stage holds.
// A pipeline of `pp` ranks with `virtual_stages` (v) model chunks each cuts
// the model into V = pp x v virtual stages, and virtual stage s holds a
// consecutive run of layers after those of stage s - 1. The first virtual
// stage also holds the token embedding, the last the final norm, the LM head
// and the loss. Which rank holds which virtual stage is the placement:
//   interleaved (Megatron-LM's, as in pipeline/schedule.h): chunk c of
//     pipeline rank r is virtual stage c * pp + r;
//   V shape (DualPipeV, ZB-V): the chunks zigzag, even chunks going down the
//     ranks and odd ones back up: chunk c of rank r is c * pp + r for even c
//     and c * pp + pp - 1 - r for odd c. With two chunks, rank r holds
//     virtual stages r and 2 pp - 1 - r: rank 0 the first and the last (the
//     embedding and the LM head), rank pp - 1 the two middle ones.
// Either way a rank's chunks in chunk order are in model order.
//
// Layers split evenly by default (num_hidden_layers a multiple of V), or as
// parallel.pipeline_layers lists them, one count per virtual stage in model
// order, or with Megatron-LM's first and last stages' counts and the rest
// even. A stage may hold no layer (only the embedding, or the head). A pure
// function of the numbers: no ranks, no communication.
#ifndef TETRA_PIPELINE_STAGE_PARTITION_H_
#define TETRA_PIPELINE_STAGE_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_parallelism.h"
#include "proto/config.pb.h"

namespace tetra {

enum class StagePlacement { kInterleaved, kVShape };

// The virtual stage of chunk `chunk` of pipeline rank `pp_rank` in a pipeline
// of `pp` ranks.
inline int VirtualStageIndex(int pp_rank, int chunk, int pp,
                             StagePlacement placement = StagePlacement::kInterleaved) {
  const bool reversed = placement == StagePlacement::kVShape && chunk % 2 == 1;
  return chunk * pp + (reversed ? pp - 1 - pp_rank : pp_rank);
}

// The pipeline rank and chunk that hold virtual stage `stage` (the inverse of
// VirtualStageIndex).
struct ChunkLocation {
  int pp_rank = 0;
  int chunk = 0;
};
inline ChunkLocation LocateVirtualStage(int stage, int pp,
                                        StagePlacement placement = StagePlacement::kInterleaved) {
  const int chunk = stage / pp, offset = stage % pp;
  const bool reversed = placement == StagePlacement::kVShape && chunk % 2 == 1;
  return {.pp_rank = reversed ? pp - 1 - offset : offset, .chunk = chunk};
}

struct StagePartition {
  int pp = 1;
  int virtual_stages = 1;
  StagePlacement placement = StagePlacement::kInterleaved;
  // pp x virtual_stages, indexed by virtual stage (model order): what
  // LanguageModel builds for each (model_parallelism.h).
  std::vector<PipelineStage> stages;

  const PipelineStage& Stage(int pp_rank, int chunk) const {
    return stages[VirtualStageIndex(pp_rank, chunk, pp, placement)];
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
// each >= 0, summing to num_hidden_layers (in model order, whatever the
// placement). Any other input is a UserError (core/user_error.h) naming the
// numbers.
absl::StatusOr<StagePartition> PartitionStages(
    int num_hidden_layers, int pp, int virtual_stages,
    absl::Span<const int32_t> pipeline_layers = {},
    StagePlacement placement = StagePlacement::kInterleaved);

// The placement a schedule uses: the V shape for parallel.schedule
// DUALPIPE_V, else interleaved.
StagePlacement PlacementOf(ParallelConfig::Schedule schedule);

// Megatron-LM's split (parallel.pipeline_first_stage_layers and
// pipeline_last_stage_layers): `first` layers on the first of `stages`
// virtual stages and `last` on the last (-1: unset, an even share), the
// others the rest evenly; a UserError naming the numbers when they do not.
absl::StatusOr<std::vector<int32_t>> FirstLastStageLayers(int num_hidden_layers, int64_t stages,
                                                          int first, int last);

// The same from a run's config (model.num_hidden_layers, parallel.pipeline,
// parallel.virtual_stages, parallel.pipeline_layers or the first and last
// stages' layers, and the placement of parallel.schedule).
absl::StatusOr<StagePartition> PartitionStages(const TrainerConfig& config);

}  // namespace tetra

#endif  // TETRA_PIPELINE_STAGE_PARTITION_H_
