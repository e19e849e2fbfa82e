// The staged backend's device path on one GPU: device tensors go to page-locked
// host memory, through the host group (a group of one here: the multi-rank
// matching is staged_communicator_mpi_test's) and back, ordered after the
// kernels that produced them on a non-default current stream, with BF16 sums
// widened to F32 on the device.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/self_communicator.h"
#include "comm/staged_communicator.h"
#include "core/cuda/stream.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gpu.h"

namespace tetra {
namespace {

Tensor DeviceCopy(const std::vector<float>& values, DType dtype = DType::kF32) {
  std::vector<float> copy = values;
  const Tensor host = Tensor::View(copy.data(), {static_cast<int64_t>(copy.size())}, DType::kF32);
  const Tensor f32 = Tensor::Empty(host.shape(), DType::kF32, DeviceType::kCUDA);
  f32.CopyFrom(host);
  if (dtype == DType::kF32) return f32;
  const Tensor narrow = Tensor::Empty(host.shape(), dtype, DeviceType::kCUDA);
  ops::Cast(f32, narrow);
  return narrow;
}

std::vector<float> HostValues(const Tensor& t) {
  Tensor f32 = t;
  if (t.dtype() != DType::kF32) {
    f32 = Tensor::Empty(t.shape(), DType::kF32, DeviceType::kCUDA);
    ops::Cast(t, f32);
  }
  std::vector<float> values(t.numel());
  Tensor::View(values.data(), {t.numel()}, DType::kF32).CopyFrom(f32);
  return values;
}

class StagedDeviceTest : public testing::Test {
 protected:
  void SetUp() override {
    TETRA_SKIP_WITHOUT_GPU();
    stream_.emplace();
    cuda::SetCurrentStream(stream_->get());
  }
  void TearDown() override { cuda::SetCurrentStream(nullptr); }

  std::optional<cuda::Stream> stream_;  // made once a GPU is known to be there
  StagedCommunicator comm_{std::make_unique<SelfCommunicator>()};
};

TEST_F(StagedDeviceTest, DeviceTensorsRoundTripAfterTheirProducers) {
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000);
  const Tensor send = DeviceCopy(values);
  const Tensor recv = Tensor::Empty(send.shape(), DType::kF32, DeviceType::kCUDA);
  comm_.AllReduce(send, recv, ReduceOp::kSum);
  EXPECT_EQ(HostValues(recv), values);
  const Tensor gathered = Tensor::Empty(send.shape(), DType::kF32, DeviceType::kCUDA);
  comm_.AllGather(send, gathered);
  EXPECT_EQ(HostValues(gathered), values);
  comm_.Broadcast(gathered, 0);
  EXPECT_EQ(HostValues(gathered), values);
}

TEST_F(StagedDeviceTest, Bf16AllReduceInPlaceWidensOnTheDevice) {
  const std::vector<float> values = {1.0f, -2.5f, 3.0f, 256.0f};
  const Tensor t = DeviceCopy(values, DType::kBF16);
  comm_.AllReduce(t, t, ReduceOp::kSum);
  EXPECT_EQ(HostValues(t), values);
}

TEST_F(StagedDeviceTest, AllToAllVMovesDeviceBlocks) {
  const std::vector<float> values = {4.0f, 5.0f, 6.0f};
  const Tensor send = DeviceCopy(values);
  const Tensor recv = Tensor::Zeros({5}, DType::kF32, DeviceType::kCUDA);
  comm_.AllToAllV(send, {2}, {1}, recv, {2}, {3});
  EXPECT_EQ(HostValues(recv), (std::vector<float>{0, 0, 0, 5, 6}));
}

}  // namespace
}  // namespace tetra
