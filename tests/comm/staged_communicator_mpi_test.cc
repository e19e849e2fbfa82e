// The staged backend over host tensors (what a CPU run with
// parallel.comm_backend MPI moves) gives the MPI backend's exact results, on
// the world and on pairs, and matches untagged messages to one peer in
// posting order, as NCCL does. Inputs are small integers, so every result is
// exact and compared for equality. Runs under mpirun with 2, 4 and 8 ranks;
// staged_rules_test checks the rules it refuses, the GPU test its device copies.
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

constexpr double kTimeoutS = 60;

Communicator& World() {
  static std::unique_ptr<Communicator> world =
      std::make_unique<StagedCommunicator>(MpiWorld(kTimeoutS));
  return *world;
}

// Consecutive pairs of world ranks (a tensor-parallel group's shape), split once.
Communicator& Pairs() {
  static std::unique_ptr<Communicator> pairs = [] {
    const int me = World().rank();
    return World().Split({me / 2 * 2, me / 2 * 2 + 1}, "pairs");
  }();
  return *pairs;
}

template <typename T>
Tensor View(std::vector<T>& v) {
  return Tensor::View(v.data(), {static_cast<int64_t>(v.size())},
                      std::is_same_v<T, float> ? DType::kF32 : DType::kI32);
}

// Element i of group rank r's input.
float Value(int r, int64_t i) { return static_cast<float>((i * 7 + r * 13) % 31 - 15); }

class StagedCommunicatorTest : public testing::TestWithParam<bool> {
 protected:
  Communicator& comm() { return GetParam() ? Pairs() : World(); }
};

TEST_P(StagedCommunicatorTest, AllReduceInAndOutOfPlace) {
  const int n = comm().size();
  std::vector<float> in(1001), out(1001), want(1001, 0.0f);
  for (int64_t i = 0; i < 1001; ++i) {
    in[i] = Value(comm().rank(), i);
    for (int r = 0; r < n; ++r) want[i] += Value(r, i);
  }
  comm().AllReduce(View(in), View(out), ReduceOp::kSum);
  EXPECT_EQ(out, want);
  comm().AllReduce(View(in), View(in), ReduceOp::kSum);
  EXPECT_EQ(in, want);
}

TEST_P(StagedCommunicatorTest, ReduceScatterAndAllGather) {
  const int n = comm().size(), me = comm().rank();
  const int64_t block = 17;
  std::vector<float> in(n * block), mine(block), want(block, 0.0f);
  for (int64_t i = 0; i < n * block; ++i) in[i] = Value(me, i);
  for (int64_t i = 0; i < block; ++i) {
    for (int r = 0; r < n; ++r) want[i] += Value(r, me * block + i);
  }
  comm().ReduceScatter(View(in), View(mine), ReduceOp::kSum);
  EXPECT_EQ(mine, want);
  std::vector<float> gathered(n * block), gather_want(n * block);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < block; ++i) gather_want[r * block + i] = Value(r, i);
  }
  std::vector<float> send(gather_want.begin() + me * block, gather_want.begin() + (me + 1) * block);
  comm().AllGather(View(send), View(gathered));
  EXPECT_EQ(gathered, gather_want);
}

TEST_P(StagedCommunicatorTest, AllToAllVWithUnevenAndEmptyBlocks) {
  const int n = comm().size(), me = comm().rank();
  // Rank s sends (s + d) % 3 elements to rank d, each 100 s + d.
  auto count = [](int s, int d) { return static_cast<int64_t>((s + d) % 3); };
  std::vector<int64_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < n; ++r) {
    send_counts[r] = count(me, r), send_offsets[r] = sent, sent += send_counts[r];
    recv_counts[r] = count(r, me), recv_offsets[r] = received, received += recv_counts[r];
  }
  std::vector<int32_t> send(sent), recv(received), want(received);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < send_counts[r]; ++j) send[send_offsets[r] + j] = 100 * me + r;
    for (int64_t j = 0; j < recv_counts[r]; ++j) want[recv_offsets[r] + j] = 100 * r + me;
  }
  comm().AllToAllV(View(send), send_counts, send_offsets, View(recv), recv_counts, recv_offsets);
  EXPECT_EQ(recv, want);
}

TEST_P(StagedCommunicatorTest, BroadcastFromTheLastRank) {
  const int root = comm().size() - 1;
  std::vector<int32_t> buffer(5, comm().rank() == root ? 7 : -1);
  comm().Broadcast(View(buffer), root);
  EXPECT_EQ(buffer, std::vector<int32_t>(5, 7));
}

// Two untagged messages to the next rank arrive in the order they were
// posted. Lone sends and receives run one at a time in posting order, as on
// NCCL, so round the ring even ranks post their sends first and odd ranks
// their receives (an even ring: each receive meets a rank that sends first).
TEST_P(StagedCommunicatorTest, UntaggedMessagesMatchInPostingOrder) {
  const int n = comm().size(), me = comm().rank();
  ASSERT_EQ(n % 2, 0) << "the ring needs an even number of ranks";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> first = {me, 1, 2}, second = {me, 3, 4};
  std::vector<int32_t> got_first(3), got_second(3);
  std::vector<CommHandle> handles;
  auto post_sends = [&] {
    handles.push_back(comm().SendAsync(View(first), next));
    handles.push_back(comm().SendAsync(View(second), next));
  };
  auto post_receives = [&] {
    handles.push_back(comm().RecvAsync(View(got_first), prev));
    handles.push_back(comm().RecvAsync(View(got_second), prev));
  };
  if (me % 2 == 0) {
    post_sends();
    post_receives();
  } else {
    post_receives();
    post_sends();
  }
  for (auto h = handles.rbegin(); h != handles.rend(); ++h) h->Wait();  // last posted first
  EXPECT_EQ(got_first, (std::vector<int32_t>{prev, 1, 2}));
  EXPECT_EQ(got_second, (std::vector<int32_t>{prev, 3, 4}));
}

// Grouped exchanges need no ordering: every rank posts its exchange with
// the next rank before the one with the previous (lone calls in that order
// would deadlock), and with a pair's one peer both ways.
TEST_P(StagedCommunicatorTest, GroupedExchangesInAnyOrder) {
  const int n = comm().size(), me = comm().rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> to_next = {me, 5}, to_prev = {me, 6, 7}, from_prev(2), from_next(3);
  CommHandle forward = comm().SendRecvAsync(View(to_next), next, View(from_prev), prev);
  CommHandle backward = comm().SendRecvAsync(View(to_prev), prev, View(from_next), next);
  backward.Wait();
  forward.Wait();
  EXPECT_EQ(from_prev, (std::vector<int32_t>{prev, 5}));
  EXPECT_EQ(from_next, (std::vector<int32_t>{next, 6, 7}));
}

INSTANTIATE_TEST_SUITE_P(Groups, StagedCommunicatorTest, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Pairs" : "World";
                         });

}  // namespace
}  // namespace tetra
