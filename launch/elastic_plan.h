// The layout of a (re)launch: tensor, context, pipeline and expert sizes as
// the recipe says, data parallelism as large as the ranks at hand allow. The
// global batch stays; each data-parallel rank runs more micro-batches when
// there are fewer of them, so every step computes the same batch.
#ifndef TETRA_LAUNCH_ELASTIC_PLAN_H_
#define TETRA_LAUNCH_ELASTIC_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace tetra {

struct ElasticPlan {
  int world = 0;
  int data = 0;
  TrainerConfig config;          // the recipe with parallel.data = data, validated for `world`
  std::string Override() const;  // "parallel.data=D"
};

// The largest data parallelism whose job of tensor x context x pipeline x
// data ranks needs at most `ranks` and at least `min_ranks`, and which the
// recipe (`config_path` with `overrides`) validates for (the global batch
// divides into micro-batches over it, expert groups fit). Otherwise a
// UserError: the reason the largest candidate was refused, or too few ranks.
absl::StatusOr<ElasticPlan> PlanElastic(const std::string& config_path,
                                        const std::vector<std::string>& overrides, int ranks,
                                        int min_ranks);

}  // namespace tetra

#endif  // TETRA_LAUNCH_ELASTIC_PLAN_H_
