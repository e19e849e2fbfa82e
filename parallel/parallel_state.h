// Where this rank stands in the job: the layout's mesh, this rank's
// coordinates and the communicators of its groups, named by the role each
// plays (as Megatron-Core's parallel_state names them), so code above comm/
// says what a collective is for, never which axes it spans:
//
//   role          ranks                        what it is for
//   world         all                          start-up checks, metrics
//   tensor        tp                           a layer's weight shards (TP, SP)
//   context       cp                           a sequence's chunks (the ring
//                                              of context-parallel attention)
//   pipeline      pp, in stage order           activations between stages
//   batch         dp                           which samples a rank reads
//   loss          dp x cp                      token losses that add up
//   grad          dp x cp                      dense gradients that add up
//   model         tp x pp                      one replica's parameters (norm)
//   expert        ep                           the routed experts' shards
//   expert_data   dp x cp / ep                 expert gradients that add up
//   embedding     first and last stage         a tied embedding's two copies
//                                              (this rank alone elsewhere)
//
// With cp = 1, batch, loss and grad are one communicator. With one rank
// every group is a single-rank communicator.
#ifndef TETRA_PARALLEL_PARALLEL_STATE_H_
#define TETRA_PARALLEL_PARALLEL_STATE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "proto/config.pb.h"

namespace tetra {

class ParallelState {
 public:
  // Builds the mesh for `world`'s size and splits the groups (collective over
  // `world`, usually every rank of the job). An impossible layout is a user error.
  static absl::StatusOr<ParallelState> Create(const ParallelConfig& parallel,
                                              std::unique_ptr<Communicator> world);

  Communicator& world() const { return *world_; }
  Communicator& tensor() const { return *tensor_; }
  Communicator& context() const { return *context_; }
  Communicator& pipeline() const { return *pipeline_; }
  Communicator& batch() const { return *batch_; }
  Communicator& loss() const { return *data_context_; }  // dp x cp
  Communicator& grad() const { return *data_context_; }  // dp x cp
  Communicator& model() const { return *model_; }
  Communicator& expert() const { return *expert_; }
  Communicator& expert_data() const { return *expert_data_; }
  Communicator& embedding() const { return *embedding_; }

  const Mesh& mesh() const { return mesh_; }
  // The layout's axis sizes: the one description of it that metrics, timing,
  // traces, reports and the planner read.
  const MeshShape& shape() const { return mesh_.shape(); }
  const RankCoords& coords() const { return coords_; }
  bool is_logging_rank() const { return world_->rank() == 0; }

 private:
  ParallelState(Mesh mesh, std::unique_ptr<Communicator> world)
      : mesh_(std::move(mesh)), world_(std::move(world)) {}

  Mesh mesh_;
  RankCoords coords_;
  std::unique_ptr<Communicator> world_, tensor_, context_, pipeline_, batch_, model_, expert_,
      expert_data_, embedding_;
  // dp x cp; with cp = 1 the batch communicator itself.
  std::unique_ptr<Communicator> own_data_context_;
  Communicator* data_context_ = nullptr;
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_PARALLEL_STATE_H_
