// The rank mesh against layouts worked out by hand (Megatron-LM's 16-GPU
// example, MoE examples, non-default orders), against its own definitions for
// every factorisation of every world size up to 1024 under every order, and
// its layout errors (the orders Megatron-LM refuses, and garbage).
#include "parallel/mesh.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/logging.h"
#include "core/user_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;
using Groups = std::vector<std::vector<int>>;

// The sweep: every (tensor, pipeline) factorisation of every world size up to
// kAllShapesUpTo and of every power of two up to kMaxWorld, and
// kShapesPerOtherWorld of each other world size up to kMaxWorld (all of them
// would take tens of seconds). No floating point here, so no tolerances: every
// comparison is exact.
constexpr int kMaxWorld = 1024;
constexpr int kAllShapesUpTo = 128;
constexpr int kShapesPerOtherWorld = 2;

ParallelConfig Parallel(int tp, int pp, int dp, int ep = 1,
                        const std::string& order = "tp-cp-ep-dp-pp") {
  ParallelConfig config;
  config.set_tensor(tp);
  config.set_pipeline(pp);
  config.set_data(dp);
  config.set_expert(ep);
  config.set_order(order);
  return config;
}

Mesh MustCreate(const ParallelConfig& config, int world) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(config, world);
  TETRA_CHECK(mesh.ok()) << mesh.status().message();
  return *std::move(mesh);
}

TEST(MeshTest, MegatronSixteenGpuExample) {
  // parallel_state.py's initialize_model_parallel docstring: 16 GPUs g0..g15,
  // tensor 2, pipeline 4, hence data 2.
  const Mesh mesh = MustCreate(Parallel(/*tp=*/2, /*pp=*/4, /*dp=*/0), 16);
  EXPECT_EQ(mesh.shape().dp, 2);
  EXPECT_EQ(mesh.Groups(GroupKind::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kPipeline),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // Model-parallel: the tp x pp ranks of one data replica (dp coordinate 0: the
  // even pairs, 1: the odd pairs); embedding: first and last pipeline stage.
  EXPECT_EQ(mesh.Groups(GroupKind::kModel),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kEmbedding), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(mesh.Group(GroupKind::kEmbedding, 5), std::vector<int>{});  // a middle stage
  // No expert parallelism: singleton EP groups, expert-data = data.
  Groups singletons;
  for (int r = 0; r < 16; ++r) singletons.push_back({r});
  EXPECT_EQ(mesh.Groups(GroupKind::kExpert), singletons);
  EXPECT_EQ(mesh.Groups(GroupKind::kContext), singletons);
  EXPECT_EQ(mesh.Groups(GroupKind::kExpertData), mesh.Groups(GroupKind::kData));
  // g11 = tp 1 + 2 x dp 1 + 4 x pp 2.
  EXPECT_EQ(mesh.Coords(11), (RankCoords{.tp = 1, .cp = 0, .ep = 0, .dp = 1, .edp = 1, .pp = 2}));
  EXPECT_EQ(mesh.NextPipelineRank(0), 4);
  EXPECT_EQ(mesh.NextPipelineRank(13), 1);  // wraps from the last stage
  EXPECT_EQ(mesh.PrevPipelineRank(3), 15);
  EXPECT_EQ(mesh.PrevPipelineRank(10), 6);
}

TEST(MeshTest, MoeExampleByHand) {
  // tensor 2, pipeline 2, data 4, expert 2 on 16 ranks; edp = 4 / 2 = 2.
  // Dense:  rank = tp + 2 dp + 8 pp.
  // Expert: rank = tp + 2 ep + 4 edp + 8 pp (tp, ep, edp, pp, first fastest).
  // An EP group fixes tp, edp, pp and runs ep over 0..1 (ranks 2 apart); an
  // EDP group fixes tp, ep, pp and runs edp over 0..1 (ranks 4 apart).
  const Mesh mesh = MustCreate(Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/4, /*ep=*/2), 16);
  EXPECT_EQ(mesh.shape().edp, 2);
  EXPECT_EQ(mesh.Groups(GroupKind::kExpert),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kExpertData),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kData),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kPipeline),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  // 13 = 1 + 2*2 + 8*1 (dense) = 1 + 2*0 + 4*1 + 8*1 (expert).
  EXPECT_EQ(mesh.Coords(13), (RankCoords{.tp = 1, .cp = 0, .ep = 0, .dp = 2, .edp = 1, .pp = 1}));
  // 6 = 0 + 2*3 (dense) = 0 + 2*1 + 4*1 (expert).
  EXPECT_EQ(mesh.Coords(6), (RankCoords{.tp = 0, .cp = 0, .ep = 1, .dp = 3, .edp = 1, .pp = 0}));
}

TEST(MeshTest, ContextParallelExampleByHand) {
  // tensor 2, context 2, data 2, pipeline 2, expert 2 on 16 ranks, Megatron's
  // order: dense rank = tp + 2 cp + 4 dp + 8 pp; expert rank = tp + 2 ep + 4
  // edp + 8 pp with edp = dp x cp / ep = 2.
  ParallelConfig config = Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/2, /*ep=*/2);
  config.set_context(2);
  const Mesh mesh = MustCreate(config, 16);
  EXPECT_EQ(mesh.shape(), MeshShape::Of(2, 2, 2, 2, 2));
  EXPECT_EQ(mesh.shape().edp, 2);
  EXPECT_EQ(mesh.Groups(GroupKind::kContext),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kData),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  // Loss and dense gradients add up over data x context: the four ranks of
  // each (tp, pp) holding the same dense weights.
  EXPECT_EQ(mesh.Groups(GroupKind::kDataContext),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  // Experts are sharded over ep out of those same four ranks.
  EXPECT_EQ(mesh.Groups(GroupKind::kExpert),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kExpertData),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kModel),
            (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  // 11 = 1 + 2*1 + 4*0 + 8*1 (dense) = 1 + 2*1 + 4*0 + 8*1 (expert).
  EXPECT_EQ(mesh.Coords(11), (RankCoords{.tp = 1, .cp = 1, .ep = 1, .dp = 0, .edp = 0, .pp = 1}));
}

TEST(MeshTest, DenseTpPpDpOrderByHand) {
  // Megatron-LM's --use-tp-pp-dp-mapping order "tp-cp-ep-pp-dp" for a dense
  // model: world 16, tensor 2, pipeline 2, data 4. Its RankGenerator orders
  // the sizes [tp 2, cp 1, ep 1, pp 2, dp 4], so rank = tp + 2 pp + 4 dp, and
  // generate_masked_orthogonal_rank_groups gives for mask "pp" the ranks
  // base + {0, 2} (bases 0, 1, 4, 5, 8, 9, 12, 13), for "dp" base + {0, 4, 8,
  // 12} (bases 0..3), for "tp-pp" base + {0, 1, 2, 3} (bases 0, 4, 8, 12).
  // The expert grid (ep 1, edp = dp 4) is the same, so Megatron-LM accepts it.
  const Mesh mesh =
      MustCreate(Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/4, /*ep=*/1, "tp-cp-ep-pp-dp"), 16);
  EXPECT_EQ(mesh.Groups(GroupKind::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kPipeline),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kData),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kModel),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kEmbedding),
            mesh.Groups(GroupKind::kPipeline));  // two stages: both ends
  EXPECT_EQ(mesh.Groups(GroupKind::kExpertData), mesh.Groups(GroupKind::kData));
  // 11 = tp 1 + 2 x pp 1 + 4 x dp 2.
  EXPECT_EQ(mesh.Coords(11), (RankCoords{.tp = 1, .cp = 0, .ep = 0, .dp = 2, .edp = 2, .pp = 1}));
  EXPECT_EQ(mesh.NextPipelineRank(11), 9);
}

TEST(MeshTest, MoeDpBeforeEpOrderByHand) {
  // "tp-cp-dp-ep-pp" ends in pp, so Megatron-LM accepts it with expert 2:
  // world 16, tensor 2, pipeline 2, data 4, hence expert-data 2.
  // Dense sizes [tp 2, cp 1, dp 4, ep 1, pp 2]: rank = tp + 2 dp + 8 pp, the
  // same groups as the default order (MoeExampleByHand).
  // Expert sizes [tp 2, cp 1, dp 2 (= edp), ep 2, pp 2]: rank = tp + 2 edp +
  // 4 ep + 8 pp, so mask "ep" gives base + {0, 4} (bases 0..3, 8..11) and mask
  // "dp" base + {0, 2} (bases 0, 1, 4, 5, 8, 9, 12, 13): the EP and EDP groups
  // of the default order swapped.
  const Mesh mesh =
      MustCreate(Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/4, /*ep=*/2, "tp-cp-dp-ep-pp"), 16);
  EXPECT_EQ(mesh.Groups(GroupKind::kData),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kPipeline),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kExpert),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(mesh.Groups(GroupKind::kExpertData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // 13 = 1 + 2*2 + 8*1 (dense) = 1 + 2*0 + 4*1 + 8*1 (expert).
  EXPECT_EQ(mesh.Coords(13), (RankCoords{.tp = 1, .cp = 0, .ep = 1, .dp = 2, .edp = 0, .pp = 1}));
}

// Axis slots for the independent decomposition below; the expert layout
// keeps edp in the dp slot and cp (size 1) anywhere.
enum Slot { kTp, kCp, kEp, kDp, kPp };
using Sizes = std::array<int, 5>;

// The order string's axes as slots, fastest first.
std::vector<int> Slots(const std::string& order) {
  const std::map<std::string, int> slot = {
      {"tp", kTp}, {"cp", kCp}, {"ep", kEp}, {"dp", kDp}, {"pp", kPp}};
  std::vector<int> slots;
  size_t start = 0;
  for (size_t dash; (dash = order.find('-', start)) != std::string::npos; start = dash + 1) {
    slots.push_back(slot.at(order.substr(start, dash - start)));
  }
  slots.push_back(slot.at(order.substr(start)));
  return slots;
}

// Peels coordinates off `rank` axis by axis, fastest first.
Sizes Decompose(int rank, const std::vector<int>& order, const Sizes& sizes) {
  Sizes coords{};
  for (int slot : order) {
    coords[slot] = rank % sizes[slot];
    rank /= sizes[slot];
  }
  return coords;
}

// The groups of `slot` in the grid of `sizes` laid out by `order`: ranks that
// agree on every other coordinate, found by comparing coordinates (no strides).
Groups GroupsOf(int world, const std::vector<int>& order, const Sizes& sizes, int slot) {
  std::map<Sizes, std::vector<int>> by_others;
  for (int rank = 0; rank < world; ++rank) {
    Sizes others = Decompose(rank, order, sizes);
    others[slot] = 0;
    by_others[others].push_back(rank);
  }
  Groups groups;
  for (auto& [others, group] : by_others) groups.push_back(group);
  std::sort(groups.begin(), groups.end());
  return groups;
}

// Whether Megatron-LM's initialize_model_parallel accepts the order (pp last,
// pipeline 1 or equal data-parallel sizes; then equal pipeline groups of the
// dense and the expert grid) and the tensor groups of the two grids agree
// (tetra's own condition).
bool OrderAccepted(const std::vector<int>& order, int tp, int dp, int pp, int ep) {
  const int world = tp * dp * pp, edp = dp / ep;
  const Sizes dense = {tp, 1, 1, dp, pp}, expert = {tp, 1, ep, edp, pp};
  return (order.back() == kPp || pp == 1 || edp == dp) &&
         GroupsOf(world, order, dense, kPp) == GroupsOf(world, order, expert, kPp) &&
         GroupsOf(world, order, dense, kTp) == GroupsOf(world, order, expert, kTp);
}

// For each group kind: the coordinates that differ between its members (the
// others are shared), the one that numbers a member within its group, and the
// axes whose sizes multiply to the group size.
struct KindSemantics {
  GroupKind kind;
  std::vector<int RankCoords::*> varying;
  int RankCoords::*index;  // nullptr: no single coordinate (model group)
  std::vector<int MeshShape::*> size;
};

RankCoords Shared(RankCoords coords, const KindSemantics& k) {
  for (int RankCoords::*member : k.varying) coords.*member = 0;
  return coords;
}

void ExpectLayoutHolds(const Mesh& mesh, const std::vector<int>& order) {
  const MeshShape& s = mesh.shape();
  SCOPED_TRACE(::testing::Message()
               << "world " << s.world << " tp " << s.tp << " pp " << s.pp << " dp " << s.dp
               << " ep " << s.ep << " order " << mesh.order());
  ASSERT_EQ(s.tp * s.cp * s.pp * s.dp, s.world);
  ASSERT_EQ(s.tp * s.ep * s.edp * s.pp, s.world);
  const Sizes dense_sizes = {s.tp, s.cp, 1, s.dp, s.pp};
  const Sizes expert_sizes = {s.tp, 1, s.ep, s.edp, s.pp};
  std::vector<RankCoords> coords(s.world);
  for (int rank = 0; rank < s.world; ++rank) {
    coords[rank] = mesh.Coords(rank);
    const Sizes dense = Decompose(rank, order, dense_sizes);
    const Sizes expert = Decompose(rank, order, expert_sizes);
    ASSERT_EQ(coords[rank], (RankCoords{.tp = dense[kTp],
                                        .cp = dense[kCp],
                                        .ep = expert[kEp],
                                        .dp = dense[kDp],
                                        .edp = expert[kDp],
                                        .pp = dense[kPp]}))
        << "rank " << rank;
    ASSERT_EQ(mesh.Rank(coords[rank]), rank);
  }
  // Within an EP or EDP group the data coordinate varies too: it is
  // ep + ep_size x edp, or edp + edp_size x ep when dp comes before ep.
  const std::vector<KindSemantics> semantics = {
      {GroupKind::kTensor, {&RankCoords::tp}, &RankCoords::tp, {&MeshShape::tp}},
      {GroupKind::kContext, {&RankCoords::cp}, &RankCoords::cp, {&MeshShape::cp}},
      {GroupKind::kData,
       {&RankCoords::dp, &RankCoords::ep, &RankCoords::edp},
       &RankCoords::dp,
       {&MeshShape::dp}},
      {GroupKind::kPipeline, {&RankCoords::pp}, &RankCoords::pp, {&MeshShape::pp}},
      {GroupKind::kExpert, {&RankCoords::ep, &RankCoords::dp}, &RankCoords::ep, {&MeshShape::ep}},
      {GroupKind::kExpertData,
       {&RankCoords::edp, &RankCoords::dp},
       &RankCoords::edp,
       {&MeshShape::edp}},
      {GroupKind::kModel,
       {&RankCoords::tp, &RankCoords::pp},
       nullptr,
       {&MeshShape::tp, &MeshShape::pp}},
  };
  for (const KindSemantics& k : semantics) {
    SCOPED_TRACE(GroupKindName(k.kind));
    const Groups& groups = mesh.Groups(k.kind);
    std::vector<int> seen(s.world, 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int>& group = groups[g];
      int size = 1;
      for (int MeshShape::*axis : k.size) size *= s.*axis;
      ASSERT_EQ(static_cast<int>(group.size()), size) << "group " << g;
      if (g > 0) {
        ASSERT_LT(groups[g - 1].front(), group.front());
      }
      for (size_t i = 0; i < group.size(); ++i) {
        const int rank = group[i];
        if (i > 0) {
          ASSERT_LT(group[i - 1], rank);
        }
        ++seen[rank];
        ASSERT_EQ(&mesh.Group(k.kind, rank), &group);
        ASSERT_EQ(Shared(coords[rank], k), Shared(coords[group.front()], k)) << "rank " << rank;
        if (k.index) {
          ASSERT_EQ(coords[rank].*k.index, static_cast<int>(i)) << "rank " << rank;
        }
      }
    }
    ASSERT_EQ(seen, std::vector<int>(s.world, 1));  // a partition of the world
  }
  // Each EP group lies inside one data-parallel group.
  for (const std::vector<int>& group : mesh.Groups(GroupKind::kExpert)) {
    for (int rank : group) {
      ASSERT_EQ(&mesh.Group(GroupKind::kData, rank), &mesh.Group(GroupKind::kData, group.front()));
    }
  }
  for (int rank = 0; rank < s.world; ++rank) {
    const std::vector<int>& pipeline = mesh.Group(GroupKind::kPipeline, rank);
    const int stage = coords[rank].pp;
    ASSERT_EQ(mesh.NextPipelineRank(rank), pipeline[(stage + 1) % s.pp]);
    ASSERT_EQ(mesh.PrevPipelineRank(mesh.NextPipelineRank(rank)), rank);
    std::vector<int> embedding;
    if (stage == 0 || stage == s.pp - 1) {
      embedding = {pipeline.front()};
      if (s.pp > 1) embedding.push_back(pipeline.back());
    }
    ASSERT_EQ(mesh.Group(GroupKind::kEmbedding, rank), embedding);
  }
  ASSERT_EQ(mesh.Groups(GroupKind::kEmbedding).size(), mesh.Groups(GroupKind::kPipeline).size());
}

TEST(MeshTest, FactorisationsOfWorldsUpTo1024) {
  // Every order of the five axes, cycled over the shapes so each order meets
  // many different sizes.
  std::vector<std::string> axes = {"cp", "dp", "ep", "pp", "tp"};
  std::vector<std::string> orders;
  do {
    orders.push_back(axes[0] + "-" + axes[1] + "-" + axes[2] + "-" + axes[3] + "-" + axes[4]);
  } while (std::next_permutation(axes.begin(), axes.end()));
  int shapes = 0, accepted = 0;
  for (int world = 1; world <= kMaxWorld; ++world) {
    std::vector<std::array<int, 2>> tp_pp;
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; world % tp == 0 && pp <= world / tp; ++pp) {
        if (world / tp % pp == 0) tp_pp.push_back({tp, pp});
      }
    }
    const bool all = world <= kAllShapesUpTo || (world & (world - 1)) == 0;
    const int count =
        all ? static_cast<int>(tp_pp.size()) : std::min<int>(kShapesPerOtherWorld, tp_pp.size());
    for (int i = 0; i < count; ++i) {
      // Skip through the other worlds' shapes so that different ones are picked.
      const auto [tp, pp] = tp_pp[all ? i : (world * 7 + i) % tp_pp.size()];
      const int dp = world / tp / pp;
      std::vector<int> eps;
      for (int ep = 1; ep <= dp; ++ep) {
        if (dp % ep == 0) eps.push_back(ep);
      }
      const int ep = eps[shapes % eps.size()];
      // Half the shapes get the default order, the rest cycle through all.
      const std::string order =
          shapes % 2 == 0 ? "tp-cp-ep-dp-pp" : orders[shapes / 2 % orders.size()];
      ++shapes;
      // Data given or derived (0).
      absl::StatusOr<Mesh> mesh =
          Mesh::Create(Parallel(tp, pp, shapes % 3 == 0 ? 0 : dp, ep, order), world);
      ASSERT_EQ(mesh.ok(), OrderAccepted(Slots(order), tp, dp, pp, ep))
          << "world " << world << " tp " << tp << " pp " << pp << " ep " << ep << " order " << order
          << ": " << mesh.status().message();
      if (!mesh.ok()) {
        // The hint's order works for the same shape.
        const std::string message = Message(mesh.status());
        const size_t start = message.find("e.g. \"") + 6;
        ASSERT_NE(start, std::string::npos + 6) << message;
        const std::string working = message.substr(start, message.find('"', start) - start);
        ASSERT_TRUE(Mesh::Create(Parallel(tp, pp, dp, ep, working), world).ok()) << message;
        continue;
      }
      ++accepted;
      ASSERT_NO_FATAL_FAILURE(ExpectLayoutHolds(*mesh, Slots(order)));
    }
  }
  EXPECT_GT(accepted, shapes / 2);
}

absl::Status CreateStatus(const ParallelConfig& config, int world) {
  return Mesh::Create(config, world).status();
}

TEST(MeshTest, ProductMustEqualTheWorldSize) {
  absl::Status status = CreateStatus(Parallel(/*tp=*/2, /*pp=*/4, /*dp=*/3), 16);
  EXPECT_THAT(
      status.message(),
      HasSubstr("tensor 2 x context 1 x pipeline 4 x data 3 = 24, but the world size is 16"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: set parallel.data to 2"));
  status = CreateStatus(Parallel(/*tp=*/3, /*pp=*/1, /*dp=*/2), 16);
  EXPECT_THAT(
      status.message(),
      HasSubstr("tensor 3 x context 1 x pipeline 1 x data 2 = 6, but the world size is 16"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: launch 6 ranks"));
}

TEST(MeshTest, DerivedDataMustDivideEvenly) {
  absl::Status status = CreateStatus(Parallel(/*tp=*/4, /*pp=*/1, /*dp=*/0), 10);
  EXPECT_THAT(status.message(), HasSubstr("tensor 4 x context 1 x pipeline 1 = 4"));
  EXPECT_THAT(status.message(), HasSubstr("the world size 10 is not a multiple of 4"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: launch 8 or 12 ranks"));
  EXPECT_THAT(CreateStatus(Parallel(/*tp=*/8, /*pp=*/2, /*dp=*/0), 8).message(),
              HasSubstr("\nhint: launch 16 ranks"));
}

TEST(MeshTest, ExpertMustDivideData) {
  absl::Status status = CreateStatus(Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/0, /*ep=*/3), 16);
  EXPECT_THAT(status.message(),
              HasSubstr("parallel.expert 3 does not divide data 4 x context 1 = 4"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: set parallel.expert to one of 1, 2, 4"));
  EXPECT_THAT(CreateStatus(Parallel(2, 2, 0, /*ep=*/8), 16).message(),
              HasSubstr("parallel.expert 8 does not divide"));
}

// MeshShape::FromConfig is the sizes' half of Mesh::Create: the same shape
// and the same errors, with no rank laid out, so an order string it does not
// read cannot fail it.
TEST(MeshTest, ShapeFromConfigChecksSizesWithoutLayingOutRanks) {
  absl::StatusOr<MeshShape> shape =
      MeshShape::FromConfig(Parallel(/*tp=*/2, /*pp=*/2, /*dp=*/0, /*ep=*/2), 16);
  ASSERT_TRUE(shape.ok()) << shape.status().message();
  EXPECT_EQ(*shape, MustCreate(Parallel(2, 2, 0, 2), 16).shape());
  EXPECT_EQ(*shape, MeshShape::Of(/*tp=*/2, /*pp=*/2, /*dp=*/4, /*ep=*/2));
  EXPECT_EQ(shape->edp, 2);
  EXPECT_EQ(shape->dense_replicas(), 4);

  EXPECT_TRUE(MeshShape::FromConfig(Parallel(2, 2, 0, 2, "no-such-order"), 16).ok());
  EXPECT_FALSE(Mesh::Create(Parallel(2, 2, 0, 2, "no-such-order"), 16).ok());
  for (const ParallelConfig& bad : {Parallel(2, 4, 3), Parallel(3, 1, 0), Parallel(2, 2, 0, 3)}) {
    EXPECT_EQ(MeshShape::FromConfig(bad, 16).status(), CreateStatus(bad, 16));
    EXPECT_FALSE(MeshShape::FromConfig(bad, 16).ok());
  }
}

TEST(MeshTest, BadOrderStrings) {
  auto message = [](const std::string& order) {
    return std::string(CreateStatus(Parallel(2, 2, 0, 1, order), 8).message());
  };
  EXPECT_THAT(message("tp-cp-xp-dp-pp"),
              HasSubstr("parallel.order \"tp-cp-xp-dp-pp\" has unknown axis \"xp\""));
  EXPECT_THAT(message("tp-tp-ep-dp-pp"), HasSubstr("names tp twice"));
  EXPECT_THAT(message("tp-cp-dp-pp"), HasSubstr("parallel.order \"tp-cp-dp-pp\" lacks ep"));
  EXPECT_THAT(message("tp-dp-pp"), HasSubstr("lacks cp, ep"));
  EXPECT_THAT(message("tp-cp-ep-dp-pp-tp"), HasSubstr("names tp twice"));
  EXPECT_THAT(message(""), HasSubstr("unknown axis \"\""));
  EXPECT_THAT(message("tp_cp_ep_dp_pp"),
              HasSubstr("\nhint: parallel.order names each of tp, cp, ep, dp, pp once"));
}

TEST(MeshTest, GarbageOrderIsQuotedShortAndNeverCrashes) {
  // 40 characters with a newline, a quote and a non-ASCII byte: the message
  // quotes a short, escaped prefix and stays one line plus the hint.
  const std::string garbage = "tp-\n\"\xff" + std::string(34, 'x');
  ASSERT_EQ(garbage.size(), 40u);
  const std::string message = Message(CreateStatus(Parallel(2, 2, 0, 1, garbage), 8));
  EXPECT_THAT(message, UserErrorShape());
  EXPECT_THAT(
      message,
      HasSubstr("parallel.order \"tp-\\x0a\\\"\\xffxxxxxxxxxxxxxxxxxx\"... (40 bytes) has unknown "
                "axis \"\\x0a\\\"\\xffxxxxxxxxxxxxxxxxxxxxx\"... (37 bytes)"));
  // Every string is an order or a user error: axis names, dashes, empty
  // tokens, NUL and other bytes in many combinations.
  const std::vector<std::string> pieces = {
      "tp", "cp", "ep", "dp", "pp", "-", "--", "", std::string(1, '\0'), "\xfe", "p", "TP", " "};
  uint32_t random = 1;  // a linear congruential generator: the same strings every run
  for (int trial = 0; trial < 2000; ++trial) {
    std::string order;
    for (int i = 0; i < 3 + trial % 9; ++i) {
      random = random * 1103515245u + 12345u;
      order += pieces[(random >> 8) % pieces.size()];
      if (random % 3 == 0) order += "-";
    }
    absl::Status status = CreateStatus(Parallel(2, 2, 0, 2, order), 8);
    if (!status.ok()) {
      EXPECT_THAT(Message(status), UserErrorShape()) << UserText(order);
    }
  }
}

TEST(MeshTest, TpPpDpOrderIsAcceptedWhereMegatronAcceptsIt) {
  // Dense (expert 1): the expert grid is the dense grid, whatever the order.
  EXPECT_TRUE(CreateStatus(Parallel(2, 2, 4, 1, "tp-cp-ep-pp-dp"), 16).ok());
  EXPECT_TRUE(CreateStatus(Parallel(1, 2, 2, 1, "tp-cp-ep-pp-dp"), 4).ok());
  EXPECT_TRUE(CreateStatus(Parallel(2, 1, 2, 1, "dp-tp-cp-ep-pp"), 4).ok());
  // Pipeline 1 with expert 2: world 8, tensor 2, data 4; dense rank = tp + 2
  // dp, expert rank = tp + 2 ep + 4 edp, as under the default order.
  absl::StatusOr<Mesh> mesh = Mesh::Create(Parallel(2, 1, 4, 2, "tp-cp-ep-pp-dp"), 8);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->Groups(GroupKind::kExpert), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh->Groups(GroupKind::kExpertData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(MeshTest, OrderGivingExpertsOtherPipelineGroupsIsRejected) {
  // "tp-cp-ep-pp-dp" with world 16, tensor 2, pipeline 2, data 4, expert 2
  // (edp 2): dense sizes [2, 1, 1, 2, 4], rank = tp + 2 pp + 4 dp, so rank 0's
  // pipeline group is [0, 2]; expert sizes [2, 1, 2, 2, 2], rank = tp + 2 ep +
  // 4 pp + 8 edp: [0, 4]. Megatron-LM asserts the same.
  absl::Status status = CreateStatus(Parallel(2, 2, 4, 2, "tp-cp-ep-pp-dp"), 16);
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_THAT(status.message(),
              HasSubstr("parallel.order \"tp-cp-ep-pp-dp\" gives dense and expert weights "
                        "different pipeline groups (rank 0: dense [0, 2], expert [0, 4])"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: put pp last, e.g. \"tp-cp-ep-dp-pp\""));
  // Tensor 1, pipeline 2, data 2, expert 2 (edp 1): dense rank = pp + 2 dp,
  // expert rank = ep + 2 pp.
  EXPECT_THAT(CreateStatus(Parallel(1, 2, 2, 2, "tp-cp-ep-pp-dp"), 4).message(),
              HasSubstr("(rank 0: dense [0, 1], expert [0, 2])"));
}

TEST(MeshTest, OrderNotEndingInPpIsRejectedAsMegatronDoesEvenWithEqualPipelineGroups) {
  // "tp-pp-cp-ep-dp": pp's stride is tp in both grids, so the pipeline groups
  // agree, but Megatron-LM asserts pp last when pipeline > 1 and the expert
  // data-parallel size (2) differs from the dense one (4).
  absl::Status status = CreateStatus(Parallel(2, 2, 4, 2, "tp-pp-cp-ep-dp"), 16);
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_THAT(
      status.message(),
      HasSubstr(
          "parallel.order \"tp-pp-cp-ep-dp\" does not end in pp, which Megatron-LM requires with "
          "pipeline 2 when the expert layers' data-parallel size (expert-data 2) differs from the "
          "dense layers' (data 4)"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: put pp last, e.g. \"tp-cp-ep-dp-pp\""));
}

TEST(MeshTest, OrderGivingExpertsOtherTensorGroupsIsRejected) {
  // "dp-tp-cp-ep-pp" with tensor 2, data 2, expert 2 (edp 1): dense rank = dp
  // + 2 tp, so rank 0's tensor group is [0, 2]; expert rank = tp + 2 ep (edp
  // has size 1): [0, 1]. Megatron-LM would accept it with a separate
  // expert-tensor group; tetra's experts use the dense tensor group.
  absl::Status status = CreateStatus(Parallel(2, 1, 2, 2, "dp-tp-cp-ep-pp"), 4);
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_THAT(status.message(),
              HasSubstr("different tensor groups (rank 0: dense [0, 2], expert [0, 1])"));
  EXPECT_THAT(status.message(), HasSubstr("\nhint: put tp first, e.g. \"tp-dp-cp-ep-pp\""));
  // dp and ep both before tp: tp's stride is dp = ep x edp in both grids.
  EXPECT_TRUE(CreateStatus(Parallel(2, 1, 4, 2, "dp-ep-tp-cp-pp"), 8).ok());
}

TEST(MeshTest, SizesBelowOne) {
  EXPECT_THAT(CreateStatus(Parallel(0, 1, 0), 4).message(),
              HasSubstr("parallel.tensor is 0, but every parallel size must be at least 1"));
  EXPECT_THAT(CreateStatus(Parallel(1, -2, 0), 4).message(), HasSubstr("parallel.pipeline is -2"));
  EXPECT_THAT(CreateStatus(Parallel(1, 1, 0, 0), 4).message(), HasSubstr("parallel.expert is 0"));
  EXPECT_THAT(CreateStatus(Parallel(1, 1, -1), 4).message(), HasSubstr("parallel.data is -1"));
  EXPECT_THAT(CreateStatus(Parallel(1, 1, 0), 0).message(), HasSubstr("the world size is 0"));
  for (const absl::Status& status :
       {CreateStatus(Parallel(0, 1, 0), 4), CreateStatus(Parallel(1, 1, 0), 0)}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("\nhint: "));
  }
}

TEST(MeshTest, HugeSizesDoNotOverflow) {
  absl::Status status = CreateStatus(Parallel(1 << 30, 1 << 30, 1 << 30), 8);
  EXPECT_THAT(status.message(), HasSubstr("but the world size is 8"));
}

}  // namespace
}  // namespace tetra
