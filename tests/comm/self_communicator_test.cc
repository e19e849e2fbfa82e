// SelfCommunicator: every collective over one rank is the identity on the
// data (out of place a copy, in place untouched; BF16 sums too, through their
// F32 widening), handles come back complete, Split keeps the world rank, and
// send/recv to oneself and mismatched tensors are fatal checks. Inputs are
// small integers, so results compare exactly.
#include "comm/self_communicator.h"

#include <cstdint>
#include <numeric>
#include <vector>

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

// `v` as a tensor of `dtype` (host memory).
template <typename T>
Tensor View(std::vector<T>& v, DType dtype) {
  return Tensor::View(v.data(), {static_cast<int64_t>(v.size())}, dtype);
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
  std::vector<float> in = Iota(kCount);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
    std::vector<float> out(kCount, kUntouched);
    CommHandle handle = comm.AllReduceAsync(View(in, DType::kF32), View(out, DType::kF32), op);
    EXPECT_TRUE(handle.Test());
    EXPECT_EQ(out, in) << ReduceOpName(op);
    std::vector<float> in_place = in;
    comm.AllReduce(View(in_place, DType::kF32), View(in_place, DType::kF32), op);
    EXPECT_EQ(in_place, in);

    out.assign(kCount, kUntouched);
    comm.ReduceScatter(View(in, DType::kF32), View(out, DType::kF32), op);
    EXPECT_EQ(out, in);
  }
}

// BF16 goes through F32 and back: exact for BF16 inputs, and the handle
// (which narrows on completion) comes back complete.
TEST(SelfCommunicatorTest, Bf16ReductionsComeBackExactly) {
  SelfCommunicator comm(kWorldRank);
  std::vector<uint16_t> in(kCount), out(kCount, 0);
  for (int64_t i = 0; i < kCount; ++i) in[i] = FloatToBf16(static_cast<float>(257 * i - 300));
  CommHandle handle =
      comm.AllReduceAsync(View(in, DType::kBF16), View(out, DType::kBF16), ReduceOp::kSum);
  EXPECT_TRUE(handle.Test());
  EXPECT_EQ(out, in);
  out.assign(kCount, 0);
  comm.ReduceScatter(View(in, DType::kBF16), View(out, DType::kBF16), ReduceOp::kMax);
  EXPECT_EQ(out, in);
}

TEST(SelfCommunicatorTest, GathersAndAllToAllCopy) {
  SelfCommunicator comm(kWorldRank);
  std::vector<int32_t> in = {3, -1, 4, 1, -5, 9, 2};
  std::vector<int32_t> out(kCount, -99);
  comm.AllGather(View(in, DType::kI32), View(out, DType::kI32));
  EXPECT_EQ(out, in);
  out.assign(kCount, -99);
  comm.AllToAll(View(in, DType::kI32), View(out, DType::kI32));
  EXPECT_EQ(out, in);
  // Block 0 of 3 elements at offset 2 lands at offset 1; the rest is untouched.
  out.assign(kCount, -99);
  comm.AllToAllV(View(in, DType::kI32), {3}, {2}, View(out, DType::kI32), {3}, {1});
  EXPECT_EQ(out, (std::vector<int32_t>{-99, 4, 1, -5, -99, -99, -99}));
}

TEST(SelfCommunicatorTest, BroadcastAndBarrierDoNothing) {
  SelfCommunicator comm(kWorldRank);
  std::vector<float> buffer = Iota(kCount);
  comm.Broadcast(View(buffer, DType::kF32), /*root=*/0);
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

TEST(SelfCommunicatorTest, MismatchedTensorsAreABug) {
  SelfCommunicator comm(kWorldRank);
  std::vector<float> floats(kCount);
  std::vector<int32_t> ints(kCount);
  EXPECT_DEATH(comm.AllReduce(View(floats, DType::kF32), View(ints, DType::kI32), ReduceOp::kSum),
               "share dtype and device");
  std::vector<float> more(kCount + 1);
  EXPECT_DEATH(comm.AllReduce(View(floats, DType::kF32), View(more, DType::kF32), ReduceOp::kSum),
               "elements but recv");
  EXPECT_DEATH(
      comm.ReduceScatter(View(more, DType::kF32), View(floats, DType::kF32), ReduceOp::kSum),
      "blocks of recv");
}

// NCCL refuses a lone send or receive to oneself; a grouped exchange with
// oneself is a copy.
TEST(SelfCommunicatorTest, PointToPointWithItselfOnlyAsAGroupedExchange) {
  SelfCommunicator comm(kWorldRank);
  float value = 1, copy = 0;
  const Tensor scalar = Tensor::View(&value, {1}, DType::kF32);
  EXPECT_DEATH(comm.Send(scalar, 0), "NCCL refuses a lone send or receive to oneself");
  EXPECT_DEATH(comm.Recv(scalar, 0), "NCCL refuses a lone send or receive to oneself");
  EXPECT_DEATH(comm.Broadcast(scalar, /*root=*/1), "not a rank of group");
  comm.SendRecv(scalar, 0, Tensor::View(&copy, {1}, DType::kF32), 0);
  EXPECT_EQ(copy, 1.0f);
  EXPECT_DEATH(comm.SendRecv(scalar, 0, scalar, 0), "buffers overlap");
}

}  // namespace
}  // namespace tetra
