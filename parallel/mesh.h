// The rank mesh: each rank's coordinates on the tensor (tp), context (cp),
// expert (ep), data (dp), expert-data (edp) and pipeline (pp) axes, and every
// communication group, computed from `parallel { ... }` and the world size with
// no MPI in it, so any layout can be built and checked on one core
// (docs/architecture.md, "Rank layout").
//
// Two decompositions of the same ranks, as Megatron-LM's parallel_state.py
// makes with two RankGenerators over the same `parallel.order` string, first
// axis fastest:
//   dense weights:  tp, cp, dp, pp (ep has size 1 in this grid: it is not a
//                   factor of the world size);
//   expert weights: tp, ep, edp, pp (cp has size 1, edp = dp * cp / ep takes
//                   dp's place in the order), so the cp and dp ranks that hold
//                   the same dense weights are split into ep groups (experts
//                   sharded) x edp groups (expert replicas).
// Accepted orders are Megatron-LM's: the two grids must have the same pipeline
// groups, and pp must come last unless pipeline is 1 or edp = dp (expert 1),
// so with expert 1 or pipeline 1 every order is accepted. tetra also needs
// the same tensor groups, which Megatron-LM does not check (it has a separate
// expert-tensor group; tetra shards experts over the dense tensor group): once
// expert > 1, dp and ep must be on the same side of tp. Errors name a rank
// whose groups differ and an order that works. Then every EP group lies
// inside one DP x CP group. E.g. the default "tp-cp-ep-dp-pp" gives dense
// rank = tp + TP dp + TP DP pp and expert rank = tp + TP ep + TP EP edp +
// TP DP pp; "tp-cp-dp-ep-pp" the same dense ranks and expert rank = tp +
// TP edp + TP EDP ep + TP DP pp.
//
// Megatron-LM's worked example (parallel_state.py), which tests/parallel/
// mesh_test.cc's MegatronSixteenGpuExample checks: 16 ranks, tensor 2,
// pipeline 4, data 2 (dense rank = tp + 2 dp + 4 pp) give
//   8 tensor groups:    [0, 1] [2, 3] [4, 5] [6, 7] [8, 9] [10, 11] [12, 13] [14, 15]
//   4 pipeline groups:  [0, 4, 8, 12] [1, 5, 9, 13] [2, 6, 10, 14] [3, 7, 11, 15]
//   8 data groups:      [0, 2] [1, 3] [4, 6] [5, 7] [8, 10] [9, 11] [12, 14] [13, 15]
//   2 model groups:     [0, 1, 4, 5, 8, 9, 12, 13] [2, 3, 6, 7, 10, 11, 14, 15]
//   4 embedding groups: [0, 12] [1, 13] [2, 14] [3, 15] (each pipeline's ends)
// so rank 5 holds tensor shard 1 of pipeline stage 1 in data replica 0.
#ifndef TETRA_PARALLEL_MESH_H_
#define TETRA_PARALLEL_MESH_H_

#include <array>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace tetra {

// Axis sizes; world = tp * cp * pp * dp = tp * ep * edp * pp. The one
// description of a layout: the trainer, its metrics and timing, traces,
// reports and the planner all read it, and every other layout value is made
// from it by one factory (ParallelState::Create, ModelParallelism::Of,
// PlanLayout::Of, RunLayout::Of), so a new axis changes this type and those
// factories, not their callers.
struct MeshShape {
  int tp = 1, cp = 1, pp = 1, dp = 1, ep = 1, edp = 1, world = 1;

  // `config`'s sizes checked against `world_size` and data derived
  // (parallel.data 0: world / (tensor x context x pipeline)), without laying
  // out a rank: what Mesh::Create checks first. Errors name the numbers and
  // end with a "\nhint: " line.
  static absl::StatusOr<MeshShape> FromConfig(const ParallelConfig& config, int world_size);
  // The shape with these free sizes (edp and world derived; ep divides dp x cp).
  static MeshShape Of(int tp, int pp, int dp, int ep = 1, int cp = 1) {
    return {.tp = tp,
            .cp = cp,
            .pp = pp,
            .dp = dp,
            .ep = ep,
            .edp = dp * cp / ep,
            .world = tp * cp * pp * dp};
  }
  // dp x cp: the ranks holding the same dense weights, whose token losses and
  // gradients add up (and which ZeRO-1 shards the optimizer over).
  int dense_replicas() const { return dp * cp; }
  bool operator==(const MeshShape&) const = default;
};

// One rank's place on each axis; each coordinate is also its index in the
// (ascending) group of that axis.
struct RankCoords {
  int tp = 0, cp = 0, ep = 0, dp = 0, edp = 0, pp = 0;
  bool operator==(const RankCoords&) const = default;
};

// The kinds of groups. kDataContext is dp x cp (the ranks holding the same
// dense weights, whose token losses and gradients add up); kModel is tp x pp (the ranks holding one
// full replica of the dense weights); kEmbedding holds the first and last stage of each pipeline
// group (the ranks whose tied embedding gradients are summed), so middle stages belong to no
// embedding group.
enum class GroupKind {
  kTensor,
  kContext,
  kData,
  kDataContext,
  kPipeline,
  kExpert,
  kExpertData,
  kModel,
  kEmbedding
};
inline constexpr std::array<GroupKind, 9> kGroupKinds = {
    GroupKind::kTensor,      GroupKind::kContext,  GroupKind::kData,
    GroupKind::kDataContext, GroupKind::kPipeline, GroupKind::kExpert,
    GroupKind::kExpertData,  GroupKind::kModel,    GroupKind::kEmbedding};

// "tp", "cp", "dp", "dpcp", "pp", "ep", "edp", "mp", "embd".
const char* GroupKindName(GroupKind kind);

class Mesh {
 public:
  // Validates `config` against `world_size` (parallel.data 0 means world /
  // (tensor x context x pipeline)) and lays out every rank. Errors name the
  // numbers and end with a "\nhint: " line.
  static absl::StatusOr<Mesh> Create(const ParallelConfig& config, int world_size);

  const MeshShape& shape() const { return shape_; }
  const std::string& order() const { return order_; }

  RankCoords Coords(int rank) const;
  // The rank at coords.tp, .cp, .dp, .pp (its .ep and .edp follow from those).
  int Rank(const RankCoords& coords) const;

  // The group of `kind` holding `rank`, ranks ascending; empty for an
  // embedding group of a middle pipeline stage.
  const std::vector<int>& Group(GroupKind kind, int rank) const;
  // Every group of `kind`, each ascending, sorted by first rank.
  const std::vector<std::vector<int>>& Groups(GroupKind kind) const;

  // The neighbouring stage in `rank`'s pipeline group, wrapping around at the
  // ends as Megatron-LM's next/previous pipeline rank do.
  int NextPipelineRank(int rank) const;
  int PrevPipelineRank(int rank) const;

 private:
  // One decomposition of the ranks: size and stride of each axis, indexed by
  // the axis enum in mesh.cc (tp, cp, ep, dp, pp).
  struct Layout {
    std::array<int, 5> size{}, stride{};
  };
  struct GroupSet {
    std::vector<std::vector<int>> groups;
    std::vector<int> group_of_rank;  // index into groups, -1 for none
  };

  Mesh() = default;
  static GroupSet Partition(const Layout& layout, int world, std::initializer_list<int> axes);
  GroupSet& SetOf(GroupKind kind) { return groups_[static_cast<int>(kind)]; }
  // Every group of every kind, from the dense and expert layouts.
  void PartitionGroups();
  // The orders Megatron-LM refuses: expert and dense weights in different
  // pipeline or tensor groups, or pp not last where the data sizes differ.
  absl::Status CheckExpertGroups(const std::array<int, 5>& order) const;

  MeshShape shape_;
  std::string order_;
  Layout dense_, expert_;
  std::array<GroupSet, kGroupKinds.size()> groups_;
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_MESH_H_
