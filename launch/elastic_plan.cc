#include "launch/elastic_plan.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "train/config_loader.h"

namespace tetra {

std::string ElasticPlan::Override() const { return absl::StrCat("parallel.data=", data); }

absl::StatusOr<ElasticPlan> PlanElastic(const std::string& config_path,
                                        const std::vector<std::string>& overrides, int ranks,
                                        int min_ranks) {
  ASSIGN_OR_RETURN(const TrainerConfig recipe, LoadRecipe(config_path, overrides));
  const ParallelConfig& p = recipe.parallel();
  const int model_ranks = p.tensor() * p.context() * p.pipeline();
  absl::Status largest_refused;
  for (int data = ranks / model_ranks; data >= 1 && data * model_ranks >= min_ranks; --data) {
    ElasticPlan plan{.world = data * model_ranks, .data = data, .config = {}};
    std::vector<std::string> with_data = overrides;
    with_data.push_back(plan.Override());
    absl::StatusOr<TrainerConfig> config = LoadConfig(config_path, with_data, plan.world);
    if (config.ok()) {
      plan.config = *std::move(config);
      return plan;
    }
    if (largest_refused.ok()) largest_refused = config.status();
  }
  if (!largest_refused.ok()) return largest_refused;
  return UserError(
      absl::StrCat(ranks, " ranks are left and the recipe's tensor x context x pipeline is ",
                   model_ranks, ", so no job of at least ", min_ranks, " ranks (--min-np) fits"),
      "bring hosts back, or lower --min-np if a smaller data parallelism may go on");
}

}  // namespace tetra
