#include "parallel/mesh.h"

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// Axis slots of Mesh::Layout; the expert layout keeps edp in the dp slot.
enum Axis { kTp, kCp, kEp, kDp, kPp, kNumAxes };
constexpr std::array<const char*, kNumAxes> kAxisNames = {"tp", "cp", "ep", "dp", "pp"};
constexpr char kDefaultOrder[] = "tp-cp-ep-dp-pp";

// Product of positive factors, saturating instead of overflowing (any product
// that large is far from every world size anyway).
int64_t Product(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::numeric_limits<int64_t>::max();
  }
  return product;
}

std::string JoinedGroup(const std::vector<int>& group) {
  return absl::StrCat("[", absl::StrJoin(group, ", "), "]");
}

// How much of a user's order string (or one of its tokens) an error quotes: a
// whole valid order is 14 characters.
constexpr size_t kOrderShown = 24;

// Parses an order string into axis slots, fastest first. Any string is either
// five distinct axis names or an error.
absl::StatusOr<std::array<int, kNumAxes>> ParseOrder(const std::string& order) {
  const std::string hint = absl::StrCat(
      "parallel.order names each of tp, cp, ep, dp, pp once, fastest first, joined by '-', "
      "e.g. the default \"",
      kDefaultOrder, "\"");
  const std::string quoted = UserText(order, kOrderShown);
  std::vector<std::string> tokens = absl::StrSplit(order, '-');
  std::array<int, kNumAxes> slots{};
  std::array<bool, kNumAxes> seen{};
  // More than kNumAxes tokens must repeat one, so slots[i] stays in bounds.
  for (size_t i = 0; i < tokens.size(); ++i) {
    int axis = 0;
    while (axis < kNumAxes && tokens[i] != kAxisNames[axis]) ++axis;
    if (axis == kNumAxes) {
      return UserError(absl::StrCat("parallel.order ", quoted, " has unknown axis ",
                                    UserText(tokens[i], kOrderShown)),
                       hint);
    }
    if (seen[axis])
      return UserError(absl::StrCat("parallel.order ", quoted, " names ", tokens[i], " twice"),
                       hint);
    seen[axis] = true;
    slots[i] = axis;
  }
  std::vector<const char*> missing;
  for (int axis = 0; axis < kNumAxes; ++axis) {
    if (!seen[axis]) missing.push_back(kAxisNames[axis]);
  }
  if (!missing.empty()) {
    return UserError(
        absl::StrCat("parallel.order ", quoted, " lacks ", absl::StrJoin(missing, ", ")), hint);
  }
  return slots;
}

// `order` (axis slots, fastest first) as a string.
std::string OrderString(const std::array<int, kNumAxes>& order) {
  std::vector<const char*> names;
  for (int axis : order) names.push_back(kAxisNames[axis]);
  return absl::StrJoin(names, "-");
}

// `order` with tp moved first and pp moved last, the other axes kept in their
// order: tensor groups are then the ranks tp apart from 0 and pipeline groups
// the ranks world / pp apart, in the dense and the expert layout alike, so
// Mesh::Create accepts it for every shape.
std::string WorkingOrder(const std::array<int, kNumAxes>& order) {
  std::array<int, kNumAxes> moved{};
  int next = 0;
  moved[next++] = kTp;
  for (int axis : order) {
    if (axis != kTp && axis != kPp) moved[next++] = axis;
  }
  moved[next] = kPp;
  return OrderString(moved);
}

// Every size given is at least 1 (data: or 0, derived).
absl::Status CheckSizesPositive(const ParallelConfig& config, int world_size) {
  if (world_size < 1) {
    return UserError(
        absl::StrCat("the world size is ", world_size, ", but a run needs at least 1 rank"),
        "launch 1 or more ranks");
  }
  for (auto [name, size] :
       {std::pair{"tensor", config.tensor()}, std::pair{"context", config.context()},
        std::pair{"pipeline", config.pipeline()}, std::pair{"expert", config.expert()}}) {
    if (size < 1) {
      return UserError(absl::StrCat("parallel.", name, " is ", size,
                                    ", but every parallel size must be at least 1"),
                       absl::StrCat("set parallel.", name, " to 1 or more"));
    }
  }
  if (config.data() < 0) {
    return UserError(
        absl::StrCat("parallel.data is ", config.data(),
                     ", but it must be at least 1, or 0 to derive it from the world size"),
        "set parallel.data to 0");
  }
  return absl::OkStatus();
}

// parallel.data, or with 0 the world size over the model-parallel sizes; the
// sizes' product must be the world size.
absl::StatusOr<int> DataSize(const ParallelConfig& config, const MeshShape& shape) {
  const std::string model_factors =
      absl::StrCat("tensor ", shape.tp, " x context ", shape.cp, " x pipeline ", shape.pp);
  const int64_t model_size = Product({shape.tp, shape.cp, shape.pp});
  const bool model_divides = shape.world % model_size == 0;
  if (config.data() == 0) {
    if (model_divides) return static_cast<int>(shape.world / model_size);
    const int64_t below = shape.world / model_size * model_size;
    return UserError(
        absl::StrCat("parallel.data 0 means the world size over ", model_factors, " = ", model_size,
                     ", but the world size ", shape.world, " is not a multiple of ", model_size),
        absl::StrCat("launch ", below > 0 ? absl::StrCat(below, " or ") : "", below + model_size,
                     " ranks, or choose tensor x pipeline dividing ", shape.world));
  }
  const int64_t product = Product({shape.tp, shape.cp, shape.pp, config.data()});
  if (product != shape.world) {
    return UserError(absl::StrCat("parallel sizes ", model_factors, " x data ", config.data(),
                                  " = ", product, ", but the world size is ", shape.world),
                     model_divides
                         ? absl::StrCat("set parallel.data to ", shape.world / model_size,
                                        " (or 0 to derive it from the world size), or launch ",
                                        product, " ranks")
                         : absl::StrCat("launch ", product,
                                        " ranks, or choose sizes whose product is ", shape.world));
  }
  return config.data();
}

}  // namespace

absl::StatusOr<MeshShape> MeshShape::FromConfig(const ParallelConfig& config, int world_size) {
  RETURN_IF_ERROR(CheckSizesPositive(config, world_size));
  MeshShape shape;
  shape.world = world_size;
  shape.tp = config.tensor();
  shape.cp = config.context();
  shape.pp = config.pipeline();
  shape.ep = config.expert();
  ASSIGN_OR_RETURN(shape.dp, DataSize(config, shape));
  const int replicas = shape.dense_replicas();
  if (replicas % shape.ep != 0) {
    std::vector<int> divisors;
    for (int d = 1; d <= replicas; ++d) {
      if (replicas % d == 0) divisors.push_back(d);
    }
    return UserError(
        absl::StrCat("parallel.expert ", shape.ep, " does not divide data ", shape.dp,
                     " x context ", shape.cp, " = ", replicas,
                     ", the ranks that hold the same dense weights and split the experts"),
        absl::StrCat("set parallel.expert to one of ", absl::StrJoin(divisors, ", ")));
  }
  shape.edp = replicas / shape.ep;
  return shape;
}

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kContext:
      return "cp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kDataContext:
      return "dpcp";
    case GroupKind::kPipeline:
      return "pp";
    case GroupKind::kExpert:
      return "ep";
    case GroupKind::kExpertData:
      return "edp";
    case GroupKind::kModel:
      return "mp";
    case GroupKind::kEmbedding:
      return "embd";
  }
  TETRA_CHECK(false) << "unknown GroupKind " << static_cast<int>(kind);
  return "";
}

Mesh::GroupSet Mesh::Partition(const Layout& layout, int world, std::initializer_list<int> axes) {
  // Two ranks share a group when they differ only on `axes`; a group's first
  // rank (its "base") has coordinate 0 on all of them and comes first.
  GroupSet set;
  set.group_of_rank.assign(world, -1);
  for (int rank = 0; rank < world; ++rank) {
    int base = rank;
    for (int axis : axes)
      base -= (rank / layout.stride[axis]) % layout.size[axis] * layout.stride[axis];
    if (base == rank) set.groups.emplace_back();
    const int group =
        base == rank ? static_cast<int>(set.groups.size()) - 1 : set.group_of_rank[base];
    set.groups[group].push_back(rank);
    set.group_of_rank[rank] = group;
  }
  return set;
}

absl::StatusOr<Mesh> Mesh::Create(const ParallelConfig& config, int world_size) {
  Mesh mesh;
  ASSIGN_OR_RETURN(mesh.shape_, MeshShape::FromConfig(config, world_size));
  ASSIGN_OR_RETURN(const auto order, ParseOrder(config.order()));
  mesh.order_ = config.order();
  const MeshShape& s = mesh.shape_;
  // Strides are the products of the sizes of the faster axes.
  auto lay_out = [&order](std::array<int, kNumAxes> size) {
    Layout layout{size, {}};
    int stride = 1;
    for (int axis : order) {
      layout.stride[axis] = stride;
      stride *= size[axis];
    }
    return layout;
  };
  // Megatron-LM's two RankGenerators: the same order string, ep of size 1 in
  // the dense grid, cp of size 1 in the expert grid (edp in dp's place).
  mesh.dense_ = lay_out({s.tp, s.cp, 1, s.dp, s.pp});
  mesh.expert_ = lay_out({s.tp, 1, s.ep, s.edp, s.pp});
  mesh.PartitionGroups();
  RETURN_IF_ERROR(mesh.CheckExpertGroups(order));
  return mesh;
}

void Mesh::PartitionGroups() {
  const int world = shape_.world;
  SetOf(GroupKind::kTensor) = Partition(dense_, world, {kTp});
  SetOf(GroupKind::kContext) = Partition(dense_, world, {kCp});
  SetOf(GroupKind::kData) = Partition(dense_, world, {kDp});
  SetOf(GroupKind::kDataContext) = Partition(dense_, world, {kCp, kDp});
  SetOf(GroupKind::kPipeline) = Partition(dense_, world, {kPp});
  SetOf(GroupKind::kModel) = Partition(dense_, world, {kTp, kPp});
  SetOf(GroupKind::kExpert) = Partition(expert_, world, {kEp});
  SetOf(GroupKind::kExpertData) = Partition(expert_, world, {kDp});
  // The embedding group: the first and last rank of each pipeline group.
  GroupSet& embedding = SetOf(GroupKind::kEmbedding);
  embedding.group_of_rank.assign(world, -1);
  for (const std::vector<int>& pipeline : SetOf(GroupKind::kPipeline).groups) {
    std::vector<int> ends = {pipeline.front()};
    if (pipeline.size() > 1) ends.push_back(pipeline.back());
    for (int rank : ends) embedding.group_of_rank[rank] = static_cast<int>(embedding.groups.size());
    embedding.groups.push_back(std::move(ends));
  }
}

absl::Status Mesh::CheckExpertGroups(const std::array<int, kNumAxes>& order) const {
  // Expert weights must be split over the same pipeline groups as the dense
  // weights around them (Megatron-LM asserts this), and, since tetra shards
  // them over the dense tensor group, the same tensor groups (Megatron-LM has
  // a separate expert-tensor group; tetra refuses the orders that would need
  // one).
  const MeshShape& s = shape_;
  const std::string working = absl::StrCat("e.g. \"", WorkingOrder(order), "\"");
  for (auto [kind, axis, name, hint] :
       {std::tuple{GroupKind::kPipeline, kPp, "pipeline", "put pp last"},
        std::tuple{GroupKind::kTensor, kTp, "tensor", "put tp first"}}) {
    const GroupSet expert = Partition(expert_, s.world, {axis});
    if (expert.groups == groups_[static_cast<int>(kind)].groups) continue;
    int rank = 0;
    while (Group(kind, rank) == expert.groups[expert.group_of_rank[rank]]) ++rank;
    return UserError(
        absl::StrCat("parallel.order \"", order_, "\" gives dense and expert weights different ",
                     name, " groups (rank ", rank, ": dense ", JoinedGroup(Group(kind, rank)),
                     ", expert ", JoinedGroup(expert.groups[expert.group_of_rank[rank]]), ")"),
        absl::StrCat(hint, ", ", working));
  }
  // Megatron-LM's other condition (initialize_model_parallel asserts both):
  // pp last unless pp is 1 or the two data-parallel sizes agree. It refuses
  // some orders whose pipeline groups agree, e.g. "tp-pp-cp-ep-dp" with
  // expert > 1.
  if (order.back() != kPp && s.pp > 1 && s.edp != s.dp) {
    return UserError(
        absl::StrCat("parallel.order \"", order_, "\" does not end in pp, which Megatron-LM ",
                     "requires with pipeline ", s.pp,
                     " when the expert layers' data-parallel size (expert-data ", s.edp,
                     ") differs from the dense layers' (data ", s.dp, ")"),
        absl::StrCat("put pp last, ", working));
  }
  return absl::OkStatus();
}

RankCoords Mesh::Coords(int rank) const {
  TETRA_CHECK(rank >= 0 && rank < shape_.world)
      << "rank " << rank << " outside world " << shape_.world;
  auto coord = [rank](const Layout& layout, int axis) {
    return rank / layout.stride[axis] % layout.size[axis];
  };
  return {.tp = coord(dense_, kTp),
          .cp = coord(dense_, kCp),
          .ep = coord(expert_, kEp),
          .dp = coord(dense_, kDp),
          .edp = coord(expert_, kDp),
          .pp = coord(dense_, kPp)};
}

int Mesh::Rank(const RankCoords& c) const {
  TETRA_CHECK(c.tp >= 0 && c.tp < shape_.tp && c.cp >= 0 && c.cp < shape_.cp && c.dp >= 0 &&
              c.dp < shape_.dp && c.pp >= 0 && c.pp < shape_.pp)
      << "coordinates tp " << c.tp << " cp " << c.cp << " dp " << c.dp << " pp " << c.pp
      << " outside the mesh";
  return c.tp * dense_.stride[kTp] + c.cp * dense_.stride[kCp] + c.dp * dense_.stride[kDp] +
         c.pp * dense_.stride[kPp];
}

const std::vector<int>& Mesh::Group(GroupKind kind, int rank) const {
  TETRA_CHECK(rank >= 0 && rank < shape_.world)
      << "rank " << rank << " outside world " << shape_.world;
  static const auto* const kNone = new std::vector<int>();  // never destroyed, so safe at exit
  const GroupSet& set = groups_[static_cast<int>(kind)];
  const int group = set.group_of_rank[rank];
  return group < 0 ? *kNone : set.groups[group];
}

const std::vector<std::vector<int>>& Mesh::Groups(GroupKind kind) const {
  return groups_[static_cast<int>(kind)].groups;
}

int Mesh::NextPipelineRank(int rank) const {
  return Group(GroupKind::kPipeline, rank)[(Coords(rank).pp + 1) % shape_.pp];
}

int Mesh::PrevPipelineRank(int rank) const {
  return Group(GroupKind::kPipeline, rank)[(Coords(rank).pp + shape_.pp - 1) % shape_.pp];
}

}  // namespace tetra
