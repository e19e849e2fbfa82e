// SelfCommunicator: every collective over one rank is the identity on the
// data (out of place a copy, in place untouched), handles come back complete,
// Split keeps the world rank, and send/recv to oneself is a fatal check.
// Inputs are small integers, so results compare exactly.
#include <cstdint>
#include <numeric>
#include <vector>

#include "comm/self_communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

constexpr int kWorldRank = 5;
constexpr int64_t kCount = 7;
constexpr float kUntouched = -99;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

TEST(SelfCommunicatorTest, DescribesAGroupOfOne) {
  SelfCommunicator comm(kWorldRank, "tp");
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.name(), "tp");
  EXPECT_EQ(comm.ranks(), std::vector<int>{kWorldRank});
  EXPECT_GT(comm.timeout_s(), 0);
}

TEST(SelfCommunicatorTest, ReductionsCopyOutOfPlaceAndLeaveInPlaceAlone) {
  SelfCommunicator comm(kWorldRank);
  const std::vector<float> in = Iota(kCount);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
    std::vector<float> out(kCount, kUntouched);
    CommHandle handle = comm.AllReduceAsync(in.data(), out.data(), kCount, DType::kF32, op);
    EXPECT_TRUE(handle.Test());
    EXPECT_EQ(out, in) << ReduceOpName(op);
    std::vector<float> in_place = in;
    comm.AllReduce(in_place.data(), in_place.data(), kCount, DType::kF32, op);
    EXPECT_EQ(in_place, in);

    out.assign(kCount, kUntouched);
    comm.ReduceScatter(in.data(), out.data(), kCount, DType::kF32, op);
    EXPECT_EQ(out, in);
  }
}

TEST(SelfCommunicatorTest, GathersAndAllToAllCopy) {
  SelfCommunicator comm(kWorldRank);
  const std::vector<int32_t> in = {3, -1, 4, 1, -5, 9, 2};
  std::vector<int32_t> out(kCount, -99);
  comm.AllGather(in.data(), out.data(), kCount, DType::kI32);
  EXPECT_EQ(out, in);
  out.assign(kCount, -99);
  comm.AllToAll(in.data(), out.data(), kCount, DType::kI32);
  EXPECT_EQ(out, in);
  // Block 0 of 3 elements at offset 2 lands at offset 1; the rest is untouched.
  out.assign(kCount, -99);
  comm.AllToAllV(in.data(), {3}, {2}, out.data(), {3}, {1}, DType::kI32);
  EXPECT_EQ(out, (std::vector<int32_t>{-99, 4, 1, -5, -99, -99, -99}));
}

TEST(SelfCommunicatorTest, BroadcastAndBarrierDoNothing) {
  SelfCommunicator comm(kWorldRank);
  std::vector<float> buffer = Iota(kCount);
  comm.Broadcast(buffer.data(), kCount, DType::kF32, /*root=*/0);
  EXPECT_EQ(buffer, Iota(kCount));
  EXPECT_TRUE(comm.BarrierAsync().Test());
}

TEST(SelfCommunicatorTest, SplitGivesAnotherSelfCommunicator) {
  SelfCommunicator comm(kWorldRank, "world");
  std::unique_ptr<Communicator> sub = comm.Split({kWorldRank}, "dp");
  ASSERT_NE(dynamic_cast<SelfCommunicator*>(sub.get()), nullptr);
  EXPECT_EQ(sub->name(), "dp");
  EXPECT_EQ(sub->ranks(), std::vector<int>{kWorldRank});
  EXPECT_DEATH(comm.Split({kWorldRank, kWorldRank + 1}, "dp"), "only hold this rank");
}

TEST(SelfCommunicatorTest, PointToPointIsABug) {
  SelfCommunicator comm(kWorldRank);
  float value = 1;
  EXPECT_DEATH(comm.Send(&value, 1, DType::kF32, 0), "no peer to send to");
  EXPECT_DEATH(comm.Recv(&value, 1, DType::kF32, 0), "no peer to receive from");
  EXPECT_DEATH(comm.Broadcast(&value, 1, DType::kF32, /*root=*/1), "not a rank of group");
}

}  // namespace
}  // namespace tetra
