#include "parallel/parallel_state.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tetra {

absl::StatusOr<Distributed> Distributed::Create(const ParallelConfig& parallel,
                                                std::unique_ptr<Communicator> world) {
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(parallel, world->size()));
  const int rank = world->rank();
  // Every rank splits every kind in the same order, so the collective Split calls line up.
  std::unique_ptr<Communicator> tp = world->Split(mesh.Group(GroupKind::kTensor, rank), "tp");
  std::unique_ptr<Communicator> dp = world->Split(mesh.Group(GroupKind::kData, rank), "dp");
  std::unique_ptr<Communicator> pp = world->Split(mesh.Group(GroupKind::kPipeline, rank), "pp");
  std::unique_ptr<Communicator> mp = world->Split(mesh.Group(GroupKind::kModel, rank), "mp");
  std::unique_ptr<Communicator> ep = world->Split(mesh.Group(GroupKind::kExpert, rank), "ep");
  std::unique_ptr<Communicator> edp = world->Split(mesh.Group(GroupKind::kExpertData, rank), "edp");
  const std::vector<int>& embedding_group = mesh.Group(GroupKind::kEmbedding, rank);
  std::unique_ptr<Communicator> embd =
      world->Split(embedding_group.empty() ? std::vector<int>{rank} : embedding_group, "embd");
  RankCoords coords = mesh.Coords(rank);
  return Distributed{std::move(world), std::move(mesh), coords,       std::move(tp),  std::move(dp),
                     std::move(pp),    std::move(mp),   std::move(ep), std::move(edp), std::move(embd)};
}

}  // namespace tetra
