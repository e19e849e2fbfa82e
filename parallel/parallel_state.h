// Where this rank stands in the job: the world communicator, the layout's
// mesh, and the communicators of this rank's tensor-, data- and
// pipeline-parallel groups, of its model group (tensor x pipeline) and of
// its expert-parallel and expert-data-parallel groups. With one rank every group is a single-rank communicator.
#ifndef TETRA_PARALLEL_PARALLEL_STATE_H_
#define TETRA_PARALLEL_PARALLEL_STATE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "proto/config.pb.h"

namespace tetra {

struct Distributed {
  std::unique_ptr<Communicator> world;
  Mesh mesh;
  RankCoords coords;                 // this rank's coordinates
  std::unique_ptr<Communicator> tp;  // tensor-parallel group
  std::unique_ptr<Communicator> dp;  // data-parallel group
  std::unique_ptr<Communicator> pp;  // pipeline group, ranks in stage order
  std::unique_ptr<Communicator> mp;  // model group: the ranks holding one model replica
  std::unique_ptr<Communicator> ep;  // expert-parallel group: the ranks splitting the routed experts
  std::unique_ptr<Communicator> edp;  // expert-data-parallel group: the ranks holding the same experts
  // Embedding group: the first and last stage of this rank's pipeline, which
  // sum the gradients of a tied embedding's two copies; this rank alone on a
  // middle stage.
  std::unique_ptr<Communicator> embd;

  bool is_logging_rank() const { return world->rank() == 0; }

  // Builds the mesh for `world`'s size and splits the groups (collective over
  // `world`). An impossible layout is a user error.
  static absl::StatusOr<Distributed> Create(const ParallelConfig& parallel,
                                            std::unique_ptr<Communicator> world);
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_PARALLEL_STATE_H_
