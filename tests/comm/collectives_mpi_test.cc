// Every operation of the MPI backend, on the world and on sub-groups (even and
// odd ranks, consecutive pairs, each rank alone), for counts 0, 1, 7, 1001 and
// several MB, in place and out of place, on host vectors seen as tensors
// (Tensor::View). Inputs are small integers that are a closed-form function
// of (world rank, index), so every result is exact in F32 and I32 and is
// compared bit for bit against the value computed here from the same formula;
// BF16 sums are checked to accumulate in F32. Runs under mpirun with 2, 4 and
// 8 ranks.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

// Deadline of every operation here: far above their run time even with 8
// ranks on 2 cores, far below ctest's TIMEOUT, so a hang fails with the
// watchdog's message instead of ctest's kill.
constexpr double kTimeoutS = 30;
// The several-MB case: 4 MiB of F32 per buffer (split into blocks for the
// operations whose buffer holds one block per rank).
constexpr int64_t kLargeCount = int64_t{1} << 20;
// Fills the parts of receive buffers that no operation should write.
constexpr int kUntouched = -99;

// Input element `i` of world rank `r`: integers in [-15, 15]; a sum over 8
// ranks stays far inside F32's exact-integer range.
int64_t Value(int r, int64_t i) { return (i * 7 + r * 13) % 31 - 15; }
// Element `j` of the block world rank `src` sends to world rank `dst`.
int64_t Element(int src, int dst, int64_t j) { return (src * 31 + dst * 7 + j * 3) % 61 - 30; }

template <typename T>
constexpr DType kDType = DType::kF32;
template <>
constexpr DType kDType<int32_t> = DType::kI32;
template <>
constexpr DType kDType<uint16_t> = DType::kBF16;  // moved as bit patterns, never reduced

// `count` elements of `v` from `offset` on, as a tensor of v's dtype.
template <typename T>
Tensor View(std::vector<T>& v, int64_t offset, int64_t count) {
  return Tensor::View(v.data() + offset, {count}, kDType<T>);
}
template <typename T>
Tensor View(std::vector<T>& v) {
  return View(v, 0, static_cast<int64_t>(v.size()));
}

// Hand-made groups, among them the shapes of a training job's groups on this
// world (tp 2 x pp 2 x dp world / 4, tp innermost): pairs are its tensor
// groups, every other rank of one half its data groups, and the ranks a half
// apart its pipeline groups (on 2 ranks: parity and self).
enum class Layout { kWorld, kParity, kPairs, kSelf, kParityInHalf, kHalfApart };

std::vector<int> GroupOf(Layout layout, int me, int world_size) {
  const int half = world_size % 4 == 0 ? world_size / 2 : world_size;
  std::vector<int> group;
  for (int r = 0; r < world_size; ++r) {
    bool member = false;
    switch (layout) {
      case Layout::kWorld:
        member = true;
        break;
      case Layout::kParity:
        member = r % 2 == me % 2;
        break;
      case Layout::kPairs:
        member = r / 2 == me / 2;
        break;
      case Layout::kSelf:
        member = r == me;
        break;
      case Layout::kParityInHalf:
        member = r % 2 == me % 2 && r / half == me / half;
        break;
      case Layout::kHalfApart:
        member = r % half == me % half;
        break;
    }
    if (member) group.push_back(r);
  }
  return group;
}

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kWorld:
      return "world";
    case Layout::kParity:
      return "parity";
    case Layout::kPairs:
      return "pairs";
    case Layout::kSelf:
      return "self";
    case Layout::kParityInHalf:
      return "parity_in_half";
    case Layout::kHalfApart:
      return "half_apart";
  }
  return "?";
}

void PrintTo(Layout layout, std::ostream* os) { *os << LayoutName(layout); }

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// Groups are split once, on first use; every rank runs the tests in the same
// order, so the collective Split calls line up.
Communicator& Group(Layout layout) {
  static std::map<Layout, std::unique_ptr<Communicator>> groups;
  if (layout == Layout::kWorld) return World();
  auto& group = groups[layout];
  if (!group) {
    group = World().Split(GroupOf(layout, World().rank(), World().size()), LayoutName(layout));
  }
  return *group;
}

int WorldRank(const Communicator& comm, int rank) { return comm.ranks()[rank]; }
int MyWorldRank(const Communicator& comm) { return WorldRank(comm, comm.rank()); }

// Counts of one buffer (or of one block, when the buffer holds a block per rank).
std::vector<int64_t> Counts(int blocks) { return {0, 1, 7, 1001, kLargeCount / blocks}; }

// Bitwise comparison; on a mismatch, names the first one and how many.
template <typename T>
void ExpectBitwiseEqual(const std::vector<T>& got, const std::vector<T>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && wrong++ == 0)
      first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(wrong, 0) << what << ": first mismatch at " << first << ": got "
                      << (first >= 0 ? +got[first] : T{}) << ", want "
                      << (first >= 0 ? +want[first] : T{});
}

template <typename T>
std::string Case(const Communicator& comm, const char* op, int64_t count, bool in_place) {
  return absl::StrCat(op, " ", DTypeName(kDType<T>), " count ", count, in_place ? " in place" : "",
                      " on ", DescribeGroup(comm), " at world rank ", MyWorldRank(comm));
}

// Element i of the reduction over the group's ranks of Value(r, offset + i).
template <typename T>
std::vector<T> Reduced(const Communicator& comm, ReduceOp op, int64_t offset, int64_t count) {
  std::vector<T> out(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t acc = op == ReduceOp::kMax ? INT64_MIN : 0;
    for (int r : comm.ranks()) {
      acc = op == ReduceOp::kMax ? std::max(acc, Value(r, offset + i)) : acc + Value(r, offset + i);
    }
    out[i] = static_cast<T>(acc);
  }
  return out;
}

// This rank's input: Value(me, i), times the group size for kMean so that
// the mean is the (exact) sum of Value.
template <typename T>
std::vector<T> Input(const Communicator& comm, ReduceOp op, int64_t count) {
  const int scale = op == ReduceOp::kMean ? comm.size() : 1;
  std::vector<T> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(Value(MyWorldRank(comm), i) * scale);
  return out;
}

template <typename T>
void CheckAllReduce(Communicator& comm, ReduceOp op, int64_t count, bool in_place) {
  std::vector<T> send = Input<T>(comm, op, count), recv(count, static_cast<T>(kUntouched));
  if (in_place) {
    comm.AllReduce(View(send), View(send), op);
    recv = send;
  } else {
    comm.AllReduce(View(send), View(recv), op);
  }
  ExpectBitwiseEqual(recv, Reduced<T>(comm, op, 0, count),
                     Case<T>(comm, ReduceOpName(op), count, in_place));
}

template <typename T>
void CheckReduceScatter(Communicator& comm, ReduceOp op, int64_t count, bool in_place) {
  const int n = comm.size(), me = comm.rank();
  std::vector<T> send = Input<T>(comm, op, n * count), recv(count, static_cast<T>(kUntouched));
  if (in_place) {
    comm.ReduceScatter(View(send), View(send, me * count, count), op);
    recv.assign(send.begin() + me * count, send.begin() + (me + 1) * count);
  } else {
    comm.ReduceScatter(View(send), View(recv), op);
  }
  ExpectBitwiseEqual(recv, Reduced<T>(comm, op, me * count, count),
                     Case<T>(comm, "reduce_scatter", count, in_place));
}

template <typename T>
void CheckAllGather(Communicator& comm, int64_t count, bool in_place) {
  const int n = comm.size(), me = comm.rank();
  std::vector<T> send(count), recv(n * count, static_cast<T>(kUntouched)), want(n * count);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i)
      want[r * count + i] = static_cast<T>(Value(WorldRank(comm, r), i));
  }
  std::copy(want.begin() + me * count, want.begin() + (me + 1) * count, send.begin());
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + me * count);
    comm.AllGather(View(recv, me * count, count), View(recv));
  } else {
    comm.AllGather(View(send), View(recv));
  }
  ExpectBitwiseEqual(recv, want, Case<T>(comm, "all_gather", count, in_place));
}

template <typename T>
void CheckAllToAll(Communicator& comm, int64_t count) {
  const int n = comm.size(), me = MyWorldRank(comm);
  std::vector<T> send(n * count), recv(n * count, static_cast<T>(kUntouched)), want(n * count);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < count; ++j) {
      send[r * count + j] = static_cast<T>(Element(me, WorldRank(comm, r), j));
      want[r * count + j] = static_cast<T>(Element(WorldRank(comm, r), me, j));
    }
  }
  comm.AllToAll(View(send), View(recv));
  ExpectBitwiseEqual(recv, want, Case<T>(comm, "all_to_all", count, false));
}

// Uneven blocks: world rank s sends ((s + 2 d) % 3) x unit elements to d
// (zero for a third of the pairs). Blocks sit in reverse rank order with a
// one-element gap after each, so offsets are honoured and gaps untouched.
template <typename T>
void CheckAllToAllV(Communicator& comm, int64_t unit) {
  const int n = comm.size(), me = MyWorldRank(comm);
  auto block = [unit](int src, int dst) { return (src + 2 * dst) % 3 * unit; };
  std::vector<int64_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
  int64_t send_size = 0, recv_size = 0;
  for (int r = n - 1; r >= 0; --r) {
    send_counts[r] = block(me, WorldRank(comm, r));
    recv_counts[r] = block(WorldRank(comm, r), me);
    send_offsets[r] = send_size;
    recv_offsets[r] = recv_size;
    send_size += send_counts[r] + 1;
    recv_size += recv_counts[r] + 1;
  }
  std::vector<T> send(send_size, static_cast<T>(kUntouched)),
      recv(recv_size, static_cast<T>(kUntouched));
  std::vector<T> want = recv;
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < send_counts[r]; ++j) {
      send[send_offsets[r] + j] = static_cast<T>(Element(me, WorldRank(comm, r), j));
    }
    for (int64_t j = 0; j < recv_counts[r]; ++j) {
      want[recv_offsets[r] + j] = static_cast<T>(Element(WorldRank(comm, r), me, j));
    }
  }
  comm.AllToAllV(View(send), send_counts, send_offsets, View(recv), recv_counts, recv_offsets);
  ExpectBitwiseEqual(recv, want, Case<T>(comm, "all_to_all_v", unit, false));
}

template <typename T>
void CheckBroadcast(Communicator& comm, int64_t count, int root) {
  std::vector<T> buffer(count, static_cast<T>(kUntouched)), want(count);
  for (int64_t i = 0; i < count; ++i) want[i] = static_cast<T>(Value(WorldRank(comm, root), i));
  if (comm.rank() == root) buffer = want;
  comm.Broadcast(View(buffer), root);
  ExpectBitwiseEqual(
      buffer, want,
      Case<T>(comm, "broadcast", count, false) + " from root " + std::to_string(root));
}

// Each rank sends to the next and receives from the previous in one grouped
// exchange (a ring; a group of one exchanges with itself).
template <typename T>
void CheckSendRecvRing(Communicator& comm, int64_t count) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<T> send(count), recv(count, static_cast<T>(kUntouched)), want(count);
  for (int64_t j = 0; j < count; ++j) {
    send[j] = static_cast<T>(Element(MyWorldRank(comm), WorldRank(comm, next), j));
    want[j] = static_cast<T>(Element(WorldRank(comm, prev), MyWorldRank(comm), j));
  }
  comm.SendRecv(View(send), next, View(recv), prev);
  ExpectBitwiseEqual(recv, want, Case<T>(comm, "send_recv ring", count, false));
}

class CollectivesTest : public testing::TestWithParam<Layout> {
 protected:
  Communicator& comm() { return Group(GetParam()); }
};

TEST_P(CollectivesTest, GroupIsTheRequestedRanks) {
  const std::vector<int> want = GroupOf(GetParam(), World().rank(), World().size());
  EXPECT_EQ(comm().ranks(), want);
  EXPECT_EQ(comm().size(), static_cast<int>(want.size()));
  EXPECT_EQ(MyWorldRank(comm()), World().rank());
  EXPECT_EQ(comm().name(), LayoutName(GetParam()));
  comm().Barrier();
}

TEST_P(CollectivesTest, AllReduce) {
  for (int64_t count : Counts(1)) {
    for (bool in_place : {false, true}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        CheckAllReduce<float>(comm(), op, count, in_place);
        // I32 takes MPI's same path as F32; the small counts cover it.
        if (count < kLargeCount) CheckAllReduce<int32_t>(comm(), op, count, in_place);
      }
      CheckAllReduce<float>(comm(), ReduceOp::kMean, count, in_place);
    }
  }
}

TEST_P(CollectivesTest, ReduceScatter) {
  for (int64_t count : Counts(comm().size())) {
    for (bool in_place : {false, true}) {
      CheckReduceScatter<float>(comm(), ReduceOp::kSum, count, in_place);
      CheckReduceScatter<int32_t>(comm(), ReduceOp::kMax, count, in_place);
      CheckReduceScatter<float>(comm(), ReduceOp::kMean, count, in_place);
    }
  }
}

TEST_P(CollectivesTest, AllGather) {
  for (int64_t count : Counts(comm().size())) {
    for (bool in_place : {false, true}) {
      CheckAllGather<float>(comm(), count, in_place);
      CheckAllGather<int32_t>(comm(), count, in_place);
      CheckAllGather<uint16_t>(comm(), count, in_place);
    }
  }
}

TEST_P(CollectivesTest, AllToAll) {
  for (int64_t count : Counts(comm().size())) {
    CheckAllToAll<float>(comm(), count);
    CheckAllToAll<uint16_t>(comm(), count);
  }
}

TEST_P(CollectivesTest, AllToAllVWithUnevenAndEmptyBlocks) {
  for (int64_t unit : {1, 7, 1001}) {
    CheckAllToAllV<float>(comm(), unit);
    CheckAllToAllV<int32_t>(comm(), unit);
  }
}

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm().size(); ++root) {
    for (int64_t count : Counts(comm().size())) {
      CheckBroadcast<float>(comm(), count, root);
    }
    CheckBroadcast<uint16_t>(comm(), 7, root);
  }
}

TEST_P(CollectivesTest, SendRecvRing) {
  for (int64_t count : Counts(1)) {
    CheckSendRecvRing<float>(comm(), count);
    CheckSendRecvRing<int32_t>(comm(), count);
  }
}

// Two messages to the same peer, received in the opposite order: MPI
// matches by tag.
TEST_P(CollectivesTest, SendRecvMatchesTags) {
  const int n = comm().size(), me = comm().rank();
  if (n == 1) GTEST_SKIP() << "a group of one has no peer (a lone send to oneself is refused)";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> first = {1, 2, 3}, second = {4, 5};
  std::vector<int32_t> got_first(3), got_second(2);
  CommHandle send_first = comm().SendAsync(View(first), next, /*tag=*/1);
  CommHandle send_second = comm().SendAsync(View(second), next, /*tag=*/2);
  comm().Recv(View(got_second), prev, /*tag=*/2);
  comm().Recv(View(got_first), prev, /*tag=*/1);
  send_first.Wait();
  send_second.Wait();
  EXPECT_EQ(got_first, first);
  EXPECT_EQ(got_second, second);
}

// Three operations in flight at once, waited in the reverse order.
TEST_P(CollectivesTest, OverlappedOperations) {
  const int n = comm().size(), me = comm().rank();
  const int64_t count = 1001;
  std::vector<float> reduce_in = Input<float>(comm(), ReduceOp::kSum, count), reduced(count);
  std::vector<int32_t> gather_in(count), gathered(n * count), gather_want(n * count);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i) gather_want[r * count + i] = Value(WorldRank(comm(), r), i);
  }
  std::copy(gather_want.begin() + me * count, gather_want.begin() + (me + 1) * count,
            gather_in.begin());
  std::vector<float> scatter_in = Input<float>(comm(), ReduceOp::kSum, n * count), scattered(count);

  CommHandle reduce = comm().AllReduceAsync(View(reduce_in), View(reduced), ReduceOp::kSum);
  CommHandle gather = comm().AllGatherAsync(View(gather_in), View(gathered));
  CommHandle scatter = comm().ReduceScatterAsync(View(scatter_in), View(scattered), ReduceOp::kSum);
  scatter.Wait();
  gather.Wait();
  reduce.Wait();
  ExpectBitwiseEqual(reduced, Reduced<float>(comm(), ReduceOp::kSum, 0, count),
                     "overlapped all_reduce");
  ExpectBitwiseEqual(gathered, gather_want, "overlapped all_gather");
  ExpectBitwiseEqual(scattered, Reduced<float>(comm(), ReduceOp::kSum, me * count, count),
                     "overlapped reduce_scatter");
}

// Host data seen as a tensor: the view aliases the vector (same address, no
// copy), carries shape, dtype and device, and moves through a collective.
TEST_P(CollectivesTest, ViewsRoundTripHostData) {
  const int n = comm().size(), me = MyWorldRank(comm());
  constexpr int64_t kRows = 2, kCols = 3;
  std::vector<int32_t> mine(kRows * kCols), all(n * kRows * kCols, kUntouched), want(all.size());
  for (int64_t i = 0; i < kRows * kCols; ++i) mine[i] = Value(me, i);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < kRows * kCols; ++i)
      want[r * kRows * kCols + i] = Value(WorldRank(comm(), r), i);
  }
  const Tensor view = Tensor::View(mine.data(), {kRows, kCols}, DType::kI32);
  EXPECT_EQ(view.raw(), mine.data());
  EXPECT_EQ(view.shape(), (Shape{kRows, kCols}));
  EXPECT_EQ(view.dtype(), DType::kI32);
  EXPECT_EQ(view.device(), DeviceType::kCPU);
  comm().AllGather(view, Tensor::View(all.data(), {n, kRows, kCols}, DType::kI32));
  ExpectBitwiseEqual(all, want, Case<int32_t>(comm(), "all_gather of views", kRows * kCols, false));
  // Writes through the view land in the vector; a clone owns a copy.
  const Tensor clone = view.Clone();
  view.data<int32_t>()[kRows * kCols - 1] = kUntouched;
  EXPECT_EQ(mine.back(), kUntouched);
  EXPECT_EQ(clone.data<int32_t>()[kRows * kCols - 1], Value(me, kRows * kCols - 1));
}

// Group rank r's input to the BF16 sums below, before the per-element power
// of two: 256 on rank 0 and 1 on the others, with 2 on the last rank when that
// makes the total even (n = 4: 256 + 1 + 1 + 2 = 260). Between 256 and 512
// BF16's 8-bit significand holds only even integers, so the F32 sum (exact:
// small integers) is a BF16 value and narrowing it is exact, while a BF16
// running sum in rank order rounds 256 + 1 back to 256 (ties to even) at
// every 1 and ends short (n = 4: 258). With one or two ranks there is at most
// one addition, which both ways round alike.
float Bf16Term(int rank, int size) {
  if (rank == 0) return 256;
  return rank == size - 1 && (size - 1) % 2 == 1 ? 2 : 1;
}

// The BF16 bits of `value`, which must be a BF16 value.
uint16_t ExactBf16(double value) {
  const uint16_t bits = FloatToBf16(static_cast<float>(value));
  EXPECT_EQ(Bf16ToFloat(bits), value) << value << " is not a BF16 value";
  return bits;
}

TEST_P(CollectivesTest, Bf16SumsAccumulateInF32) {
  const int n = comm().size(), me = comm().rank();
  const int64_t count = 1001;
  auto term = [n](int rank, int64_t i) {
    return Bf16Term(rank, n) * static_cast<float>(1 << (i % 4));
  };
  auto sum = [&](int64_t i) {
    double total = 0;
    for (int r = 0; r < n; ++r) total += term(r, i);
    return total;
  };
  float running = term(0, 0);
  for (int r = 1; r < n; ++r) running = Bf16ToFloat(FloatToBf16(running + term(r, 0)));
  if (n >= 3) {
    ASSERT_NE(running, sum(0)) << "inputs a BF16 running sum gets right prove nothing";
  }

  std::vector<uint16_t> send(count), recv(count, static_cast<uint16_t>(kUntouched)), want(count);
  for (int64_t i = 0; i < count; ++i) send[i] = ExactBf16(term(me, i)), want[i] = ExactBf16(sum(i));
  comm().AllReduce(View(send), View(recv), ReduceOp::kSum);
  ExpectBitwiseEqual(recv, want, Case<uint16_t>(comm(), "all_reduce (sum)", count, false));
  comm().AllReduce(View(send), View(send), ReduceOp::kSum);
  ExpectBitwiseEqual(send, want, Case<uint16_t>(comm(), "all_reduce (sum)", count, true));

  for (bool in_place : {false, true}) {
    std::vector<uint16_t> blocks(n * count);
    for (int64_t i = 0; i < n * count; ++i) blocks[i] = ExactBf16(term(me, i));
    for (int64_t i = 0; i < count; ++i) want[i] = ExactBf16(sum(me * count + i));
    recv.assign(count, static_cast<uint16_t>(kUntouched));
    if (in_place) {
      comm().ReduceScatter(View(blocks), View(blocks, me * count, count), ReduceOp::kSum);
      recv.assign(blocks.begin() + me * count, blocks.begin() + (me + 1) * count);
    } else {
      comm().ReduceScatter(View(blocks), View(recv), ReduceOp::kSum);
    }
    ExpectBitwiseEqual(recv, want, Case<uint16_t>(comm(), "reduce_scatter (sum)", count, in_place));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CollectivesTest,
                         testing::Values(Layout::kWorld, Layout::kParity, Layout::kPairs,
                                         Layout::kSelf, Layout::kParityInHalf, Layout::kHalfApart),
                         [](const testing::TestParamInfo<Layout>& info) {
                           return std::string(LayoutName(info.param));
                         });

// Timeout messages name groups by their world ranks, ranges shortened.
TEST(GroupDescriptionTest, NamesWorldRanks) {
  const int n = World().size();
  std::vector<std::string> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::to_string(r));
  const std::string world_list = n >= 3 ? absl::StrCat("0-", n - 1) : absl::StrJoin(ranks, ", ");
  EXPECT_EQ(DescribeGroup(World()), absl::StrCat("group world (world ranks ", world_list, ")"));
  std::vector<std::string> same_parity;
  for (int r = World().rank() % 2; r < n; r += 2) same_parity.push_back(std::to_string(r));
  EXPECT_EQ(DescribeGroup(Group(Layout::kParity)),
            absl::StrCat("group parity (world ranks ", absl::StrJoin(same_parity, ", "), ")"));
}

}  // namespace
}  // namespace tetra
