#include "pipeline/stage_partition.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/user_error.h"

namespace tetra {

absl::StatusOr<StagePartition> PartitionStages(int num_hidden_layers, int pp, int virtual_stages,
                                               absl::Span<const int32_t> pipeline_layers, StagePlacement placement) {
  if (pp < 1 || virtual_stages < 1) {
    return UserError(absl::StrCat("parallel.pipeline is ", pp, " and parallel.virtual_stages is ",
                                  virtual_stages, "; both must be at least 1."),
                     "set parallel.pipeline and parallel.virtual_stages to positive numbers.");
  }
  const int64_t count = int64_t{pp} * virtual_stages;  // of two int32s: no overflow
  const std::string stages_text = absl::StrCat(count, " virtual pipeline stages (pipeline ", pp,
                                               " x virtual_stages ", virtual_stages, ")");
  // Allocated once count is known to be at most the layers or the list's length.
  std::vector<int> layers;
  if (pipeline_layers.empty()) {
    if (num_hidden_layers < count || num_hidden_layers % count != 0) {
      return UserError(
          absl::StrCat("model.num_hidden_layers = ", num_hidden_layers,
                       " does not split evenly over ", stages_text, "."),
          absl::StrCat("use a multiple of ", count,
                       " layers, change parallel.pipeline or parallel.virtual_stages, or list the "
                       "layers of each virtual stage in parallel.pipeline_layers."));
    }
    layers.assign(count, static_cast<int>(num_hidden_layers / count));
  } else {
    if (static_cast<int64_t>(pipeline_layers.size()) != count) {
      return UserError(absl::StrCat("parallel.pipeline_layers has ", pipeline_layers.size(),
                                    " entries but there are ", stages_text, "."),
                       absl::StrCat("give one layer count per virtual stage (", count,
                                     "), in model order, or none for an even split."));
    }
    layers.resize(count);
    int64_t sum = 0;
    for (int64_t s = 0; s < count; ++s) {
      if (pipeline_layers[s] < 1) {
        return UserError(absl::StrCat("parallel.pipeline_layers[", s, "] is ", pipeline_layers[s],
                                      "; every virtual stage needs at least one layer."),
                         "give every virtual stage one or more layers, or use fewer stages.");
      }
      layers[s] = pipeline_layers[s];
      sum += pipeline_layers[s];
    }
    if (sum != num_hidden_layers) {
      return UserError(absl::StrCat("parallel.pipeline_layers sums to ", sum,
                                    " layers but model.num_hidden_layers is ", num_hidden_layers,
                                    "."),
                       "make the per-stage layer counts add up to model.num_hidden_layers.");
    }
  }
  StagePartition partition{.pp = pp, .virtual_stages = virtual_stages, .placement = placement, .stages = {}};
  int first = 0;
  for (int64_t s = 0; s < count; ++s) {
    partition.stages.push_back(PipelineStage{.first_layer = first,
                                             .num_layers = layers[s],
                                             .has_embedding = s == 0,
                                             .has_head = s == count - 1});
    first += layers[s];
  }
  return partition;
}

StagePlacement PlacementOf(ParallelConfig::Schedule schedule) {
  return schedule == ParallelConfig::DUALPIPE_V ? StagePlacement::kVShape : StagePlacement::kInterleaved;
}

absl::StatusOr<StagePartition> PartitionStages(const TrainerConfig& config) {
  const ParallelConfig& p = config.parallel();
  const absl::Span<const int32_t> layers(p.pipeline_layers().data(), p.pipeline_layers().size());
  return PartitionStages(config.model().num_hidden_layers(), p.pipeline(), p.virtual_stages(), layers,
                         PlacementOf(p.schedule()));
}

}  // namespace tetra
