// Device tensors and the device runtime: allocation, copies in every
// direction, the arena (bump allocation, no cudaMalloc while installed),
// streams and events.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/device.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu.h"
#include "tests/testing/gradient_check.h"

namespace tetra {
namespace {

// Host fp32 tensor of N(0, 1) values from (stream).
Tensor HostRandom(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::Empty(shape);
  const std::vector<float> values = testing::RandomVector(t.numel(), stream);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

TEST(DeviceTest, CountIsZeroWithAReasonOrPositive) {
  std::string why;
  const int count = cuda::DeviceCount(&why);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  }
}

TEST(TensorGpuTest, RoundTripThroughTheDeviceIsExact) {
  TETRA_SKIP_WITHOUT_GPU();
  const Tensor host = HostRandom({5, 7}, 1);
  const Tensor device = Tensor::Empty({5, 7}, DType::kF32, DeviceType::kCUDA);
  EXPECT_EQ(device.device(), DeviceType::kCUDA);
  device.CopyFrom(host);
  const Tensor copy = device.Clone();  // device to device
  Tensor back = Tensor::Empty({5, 7});
  back.CopyFrom(copy.Slice(0, 5));
  for (int64_t i = 0; i < host.numel(); ++i) ASSERT_EQ(back.f32()[i], host.f32()[i]) << i;
  // A slice of a device tensor copies exactly its rows.
  Tensor rows = Tensor::Empty({2, 7});
  rows.CopyFrom(device.Slice(3, 5));
  for (int64_t i = 0; i < rows.numel(); ++i) ASSERT_EQ(rows.f32()[i], host.f32()[21 + i]) << i;
}

TEST(TensorGpuTest, ZerosAndFill) {
  TETRA_SKIP_WITHOUT_GPU();
  const Tensor zeros = Tensor::Zeros({1000}, DType::kF32, DeviceType::kCUDA);
  Tensor host = Tensor::Empty({1000});
  host.Fill(5.0f);
  host.CopyFrom(zeros);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(host.f32()[i], 0.0f) << i;
  zeros.Fill(2.5f);
  host.CopyFrom(zeros);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(host.f32()[i], 2.5f) << i;
}

// Device tensors come from the stream-ordered pool: making and dropping
// them (and a scratch buffer that grows) calls neither cudaMalloc nor
// cudaFree, which would wait for the device.
TEST(TensorGpuTest, DeviceMemoryComesFromThePoolWithoutWaitingForTheDevice) {
  TETRA_SKIP_WITHOUT_GPU();
  const int64_t before = cuda::SynchronizingAllocations();
  for (int64_t n : {10, 1000, 1 << 20, 10}) {
    const Tensor a = Tensor::Zeros({n}, DType::kF32, DeviceType::kCUDA);
    const Tensor b = Tensor::Empty({n}, DType::kBF16, DeviceType::kCUDA);
    EXPECT_NE(a.raw(), b.raw());
    void* buffer = cuda::AllocateDeviceBuffer(n * 4);
    cuda::FreeDeviceBuffer(buffer);
  }
  EXPECT_EQ(cuda::SynchronizingAllocations(), before);
  EXPECT_EQ(SynchronizingDeviceAllocations(), before);
}

TEST(TensorGpuTest, StreamAndEventsOrderWork) {
  TETRA_SKIP_WITHOUT_GPU();
  cuda::Stream stream;
  cuda::Event start(/*timing=*/true), stop(/*timing=*/true);
  const Tensor host = HostRandom({1 << 16}, 2);
  const Tensor device = Tensor::Empty({1 << 16}, DType::kF32, DeviceType::kCUDA);
  cuda::SetCurrentStream(stream.get());
  start.Record(stream.get());
  device.CopyFrom(host);  // enqueued on the current stream, waited for
  stop.Record(stream.get());
  cuda::SetCurrentStream(nullptr);
  stop.Synchronize();
  EXPECT_TRUE(stop.Done());
  EXPECT_GE(stop.ElapsedMs(start), 0.0f);
}

}  // namespace
}  // namespace tetra
