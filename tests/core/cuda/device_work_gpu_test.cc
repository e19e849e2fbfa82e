// The counts of core/device_work.h: each launch, host wait and allocation a
// device call makes is counted once, and nothing else is.
#include "core/cuda/device.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/device_work.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gpu.h"

namespace tetra {
namespace {

// What `work` adds to the counts.
template <typename Work>
DeviceWorkCounts CountsOf(Work work) {
  const DeviceWorkCounts before = DeviceWorkSoFar();
  work();
  return DeviceWorkSoFar() - before;
}

void ExpectCounts(const DeviceWorkCounts& got, int64_t launches, int64_t host_waits,
                  int64_t allocations) {
  EXPECT_EQ(got.launches, launches);
  EXPECT_EQ(got.host_waits, host_waits);
  EXPECT_EQ(got.allocations, allocations);
}

TEST(DeviceWorkGpuTest, AllocationsCopiesAndTheirWaits) {
  TETRA_SKIP_WITHOUT_GPU();
  Tensor device;
  ExpectCounts(CountsOf([&] { device = Tensor::Zeros({64}, DType::kF32, DeviceType::kCUDA); }), 1,
               0, 1);  // the allocation and its fill
  const Tensor host = Tensor::Zeros({64});
  // A copy from host memory returns once the host memory may be reused.
  ExpectCounts(CountsOf([&] { device.CopyFrom(host); }), 1, 1, 0);
  ExpectCounts(CountsOf([&] { (void)OnHost(device); }), 1, 1,
               0);  // host memory: no device allocation
}

TEST(DeviceWorkGpuTest, KernelsAndGemmsAreLaunchesAndSynchronisingIsAWait) {
  TETRA_SKIP_WITHOUT_GPU();
  const Tensor x = Tensor::Zeros({8, 16}, DType::kF32, DeviceType::kCUDA);
  const Tensor w = Tensor::Zeros({4, 16}, DType::kF32, DeviceType::kCUDA);
  const Tensor y = Tensor::Zeros({8, 4}, DType::kF32, DeviceType::kCUDA);
  ops::Linear(x, w, y);  // the first GEMM allocates cuBLASLt's workspace
  ExpectCounts(CountsOf([&] { ops::Linear(x, w, y); }), 1, 0, 0);
  ExpectCounts(CountsOf([&] { ops::Add(y, y); }), 1, 0, 0);
  ExpectCounts(CountsOf([] { cuda::Synchronize(); }), 0, 1, 0);
  ExpectCounts(CountsOf([] { cuda::SynchronizeUncounted(); }), 0, 0, 0);
}

}  // namespace
}  // namespace tetra
