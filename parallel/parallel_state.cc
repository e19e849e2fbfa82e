#include "parallel/parallel_state.h"

#include <utility>

#include "core/logging.h"
#include "core/status_macros.h"

namespace tetra {

absl::StatusOr<ParallelState> ParallelState::Create(const ParallelConfig& parallel,
                                                    std::unique_ptr<Communicator> world) {
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(parallel, world->size()));
  const int rank = world->rank();
  ParallelState state(std::move(mesh), std::move(world));
  const Mesh& m = state.mesh_;
  Communicator& w = *state.world_;
  // Mesh ranks are positions in `world`, which may itself be a part of the
  // job (a test's); Split takes the job's ranks. Every rank splits every
  // group in the same order, so the collective Split calls line up.
  auto split = [&](const std::vector<int>& group, const char* name) {
    std::vector<int> ranks;
    for (int r : group) ranks.push_back(w.ranks()[r]);
    return w.Split(ranks, name);
  };
  state.tensor_ = split(m.Group(GroupKind::kTensor, rank), "tp");
  state.context_ = split(m.Group(GroupKind::kContext, rank), "cp");
  state.batch_ = split(m.Group(GroupKind::kData, rank), "dp");
  if (m.shape().cp > 1)
    state.own_data_context_ = split(m.Group(GroupKind::kDataContext, rank), "dpcp");
  state.data_context_ =
      state.own_data_context_ ? state.own_data_context_.get() : state.batch_.get();
  state.pipeline_ = split(m.Group(GroupKind::kPipeline, rank), "pp");
  state.model_ = split(m.Group(GroupKind::kModel, rank), "mp");
  state.expert_ = split(m.Group(GroupKind::kExpert, rank), "ep");
  state.expert_data_ = split(m.Group(GroupKind::kExpertData, rank), "edp");
  const std::vector<int>& embedding = m.Group(GroupKind::kEmbedding, rank);
  state.embedding_ = split(embedding.empty() ? std::vector<int>{rank} : embedding, "embd");
  state.coords_ = m.Coords(rank);
  return state;
}

}  // namespace tetra
