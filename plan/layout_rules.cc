#include "plan/layout_rules.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "model/model_dims.h"
#include "parallel/context_shard.h"

namespace tetra {
namespace {

int RoutedExperts(const ModelConfig& m) { return m.has_moe() ? m.moe().n_routed_experts() : 0; }

absl::Status CheckExperts(const ModelConfig& m, const MeshShape& mesh) {
  const int experts = RoutedExperts(m);
  if (experts == 0) {
    if (mesh.ep == 1) return absl::OkStatus();
    return UserError(absl::StrCat("expert ", mesh.ep, ": the model has no routed experts"),
                     "plan with expert 1");
  }
  if (experts % mesh.ep != 0) {
    return UserError(
        absl::StrCat("expert ", mesh.ep, " does not divide model.moe.n_routed_experts ", experts),
        "use an expert size dividing the number of routed experts");
  }
  // Expert-parallel groups are carved out of the data x context ranks.
  if (mesh.dense_replicas() % mesh.ep != 0) {
    return UserError(
        absl::StrCat("expert ", mesh.ep, " does not divide data ", mesh.dp, " x context ", mesh.cp),
        "use an expert size dividing data x context");
  }
  const int features = m.moe().moe_intermediate_size();
  if (features % mesh.tp != 0) {
    return UserError(
        absl::StrCat("tensor ", mesh.tp, " does not divide model.moe.moe_intermediate_size ",
                     features, ": tensor-parallel experts split their features evenly"),
        "use a tensor size dividing the experts' width");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScheduleSpec> LayoutScheduleSpec(const TrainerConfig& config,
                                                const MeshShape& mesh) {
  TrainerConfig layout = config;
  ParallelConfig& parallel = *layout.mutable_parallel();
  if (mesh.pp != parallel.pipeline()) parallel.clear_pipeline_layers();
  parallel.set_pipeline(mesh.pp);
  if (mesh.pp == 1) {
    parallel.set_schedule(ParallelConfig::ONE_F_ONE_B);
    parallel.set_virtual_stages(1);
  }
  return ScheduleSpecFromConfig(layout, mesh.dp);
}

absl::Status CheckLayoutRuns(const TrainerConfig& config, const MeshShape& mesh) {
  const ModelConfig& m = config.model();
  const TrainConfig& t = config.train();
  if (mesh.pp > m.num_hidden_layers()) {
    return UserError(absl::StrCat("pipeline ", mesh.pp, " exceeds model.num_hidden_layers ",
                                  m.num_hidden_layers(), ": every stage holds at least one layer"),
                     "use fewer pipeline stages");
  }
  if (const int64_t per_round = int64_t{t.micro_batch_size()} * mesh.dp;
      t.global_batch_size() % per_round != 0) {
    return UserError(
        absl::StrCat("data ", mesh.dp, ": train.global_batch_size ", t.global_batch_size(),
                     " is not a multiple of train.micro_batch_size ", t.micro_batch_size(),
                     " x data ", mesh.dp,
                     ", so data-parallel ranks would not take whole micro-batches"),
        "use a data size dividing global_batch_size / micro_batch_size");
  }
  RETURN_IF_ERROR(CheckExperts(m, mesh));
  RETURN_IF_ERROR(LayoutScheduleSpec(config, mesh).status());
  RETURN_IF_ERROR(CheckContextParallel(config, mesh.cp));
  // Sequence parallelism splits a micro-batch's rows on this rank, T / cp of each sequence, over
  // tp.
  const bool sequence_parallel = mesh.tp > 1 && RoutedExperts(m) == 0;
  return ValidateTensorParallel(m, mesh.tp, sequence_parallel,
                                int64_t{t.micro_batch_size()} * t.seq_length() / mesh.cp);
}

}  // namespace tetra
