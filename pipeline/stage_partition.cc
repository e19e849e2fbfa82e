#include "pipeline/stage_partition.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {

namespace {

// num_hidden_layers split evenly over `count` virtual stages.
absl::StatusOr<std::vector<int>> EvenLayers(int num_hidden_layers, int64_t count,
                                            const std::string& stages_text) {
  if (num_hidden_layers < count || num_hidden_layers % count != 0) {
    return UserError(
        absl::StrCat("model.num_hidden_layers = ", num_hidden_layers,
                     " does not split evenly over ", stages_text, "."),
        absl::StrCat("use a multiple of ", count,
                     " layers, change parallel.pipeline or parallel.virtual_stages, or set "
                     "parallel.pipeline_first_stage_layers and pipeline_last_stage_layers (tetra "
                     "plan --cluster proposes them)."));
  }
  return std::vector<int>(count, static_cast<int>(num_hidden_layers / count));
}

// parallel.pipeline_layers, checked: one count per virtual stage, none
// negative, summing to the model's layers.
absl::StatusOr<std::vector<int>> ListedLayers(int num_hidden_layers, int64_t count,
                                              absl::Span<const int32_t> pipeline_layers,
                                              const std::string& stages_text) {
  if (static_cast<int64_t>(pipeline_layers.size()) != count) {
    return UserError(absl::StrCat("parallel.pipeline_layers has ", pipeline_layers.size(),
                                  " entries but there are ", stages_text, "."),
                     absl::StrCat("give one layer count per virtual stage (", count,
                                  "), in model order, or none for an even split."));
  }
  std::vector<int> layers(count);
  int64_t sum = 0;
  for (int64_t s = 0; s < count; ++s) {
    if (pipeline_layers[s] < 0) {
      return UserError(absl::StrCat("parallel.pipeline_layers[", s, "] is ", pipeline_layers[s],
                                    "; a virtual stage holds zero or more layers."),
                       "give every virtual stage zero or more layers.");
    }
    layers[s] = pipeline_layers[s];
    sum += pipeline_layers[s];
  }
  if (sum != num_hidden_layers) {
    return UserError(
        absl::StrCat("parallel.pipeline_layers sums to ", sum,
                     " layers but model.num_hidden_layers is ", num_hidden_layers, "."),
        "make the per-stage layer counts add up to model.num_hidden_layers.");
  }
  return layers;
}

}  // namespace

absl::StatusOr<StagePartition> PartitionStages(int num_hidden_layers, int pp, int virtual_stages,
                                               absl::Span<const int32_t> pipeline_layers,
                                               StagePlacement placement) {
  if (pp < 1 || virtual_stages < 1) {
    return UserError(absl::StrCat("parallel.pipeline is ", pp, " and parallel.virtual_stages is ",
                                  virtual_stages, "; both must be at least 1."),
                     "set parallel.pipeline and parallel.virtual_stages to positive numbers.");
  }
  const int64_t count = int64_t{pp} * virtual_stages;  // of two int32s: no overflow
  const std::string stages_text = absl::StrCat(count, " virtual pipeline stages (pipeline ", pp,
                                               " x virtual_stages ", virtual_stages, ")");
  // Allocated once count is known to be at most the layers or the list's length.
  ASSIGN_OR_RETURN(const std::vector<int> layers,
                   pipeline_layers.empty()
                       ? EvenLayers(num_hidden_layers, count, stages_text)
                       : ListedLayers(num_hidden_layers, count, pipeline_layers, stages_text));
  StagePartition partition{
      .pp = pp, .virtual_stages = virtual_stages, .placement = placement, .stages = {}};
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
  return schedule == ParallelConfig::DUALPIPE_V ? StagePlacement::kVShape
                                                : StagePlacement::kInterleaved;
}

absl::StatusOr<std::vector<int32_t>> FirstLastStageLayers(int num_hidden_layers, int64_t stages,
                                                          int first, int last) {
  const bool has_first = first >= 0, has_last = last >= 0;
  const int64_t others = stages - has_first - has_last;
  const int64_t rest = int64_t{num_hidden_layers} - std::max(first, 0) - std::max(last, 0);
  const std::string given = absl::StrCat("parallel.pipeline_first_stage_layers ", first,
                                         " and pipeline_last_stage_layers ", last);
  if (first < -1 || last < -1 || stages < 2 || rest < 0 || (others == 0 && rest != 0) ||
      (others > 0 && rest % others != 0)) {
    std::string why =
        absl::StrCat("leave ", rest, " of model.num_hidden_layers ", num_hidden_layers, " to ",
                     others, " other virtual stages, which cannot split them evenly");
    if (first < -1 || last < -1) why = "must be >= 0 (or -1: unset)";
    if (stages < 2) why = absl::StrCat("need two or more virtual stages, but there are ", stages);
    if (rest < 0)
      why = absl::StrCat("add up to more than model.num_hidden_layers ", num_hidden_layers);
    return UserError(
        absl::StrCat(given, " ", why),
        absl::StrCat(
            "choose them so that the layers they leave are a multiple of ",
            std::max<int64_t>(others, 1),
            ", or list every stage's layers in parallel.pipeline_layers (tetra plan --cluster "
            "proposes a split)"));
  }
  std::vector<int32_t> layers(stages, others > 0 ? static_cast<int32_t>(rest / others) : 0);
  if (has_first) layers.front() = first;
  if (has_last) layers.back() = last;
  return layers;
}

absl::StatusOr<StagePartition> PartitionStages(const TrainerConfig& config) {
  const ParallelConfig& p = config.parallel();
  std::vector<int32_t> layers(p.pipeline_layers().begin(), p.pipeline_layers().end());
  const bool first_last =
      p.pipeline_first_stage_layers() >= 0 || p.pipeline_last_stage_layers() >= 0;
  if (first_last && !layers.empty()) {
    return UserError(
        "parallel.pipeline_layers and parallel.pipeline_first_stage_layers / "
        "pipeline_last_stage_layers both say how to split the layers",
        "give one of them");
  }
  if (first_last) {
    ASSIGN_OR_RETURN(layers, FirstLastStageLayers(config.model().num_hidden_layers(),
                                                  int64_t{p.pipeline()} * p.virtual_stages(),
                                                  p.pipeline_first_stage_layers(),
                                                  p.pipeline_last_stage_layers()));
  }
  return PartitionStages(config.model().num_hidden_layers(), p.pipeline(), p.virtual_stages(),
                         layers, PlacementOf(p.schedule()));
}

}  // namespace tetra
