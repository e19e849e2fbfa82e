// The emulated GPU's kernel engine and runtime against CUDA's rules: block
// reductions through barriers and warp shuffles compute what the hardware
// computes; what the hardware refuses or faults on (launch limits, dynamic
// shared memory past the kernel's limit, a warp operation a lane misses, a
// misaligned 16-byte access, a write past a device allocation, a copy whose
// pointers do not match its kind) ends the process with a message naming it;
// a host read that does not wait for its stream sees stale data.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

// Device memory holding `values`, freed at scope end.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : size_(values.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), size_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data_); }
  T* get() const { return data_; }
  std::vector<T> Read() const {
    std::vector<T> out(size_);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  size_t size_;
  T* data_ = nullptr;
};

// out[block] = sum of x over the block's 256 elements: shuffles, then a barrier.
__global__ void BlockSumKernel(const float* x, float* out) {
  __shared__ float partial[32];
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  out[blockIdx.x] = BlockSum(v, partial);
}

// The same sum with the barrier between the warps' writes and reads missing.
__global__ void RacyBlockSumKernel(const float* x, float* out) {
  __shared__ float partial[32];
  const float v = WarpSum(x[blockIdx.x * blockDim.x + threadIdx.x]);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  if (threadIdx.x == 0) {
    float sum = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) sum += partial[w];
    out[blockIdx.x] = sum;
  }
}

std::vector<float> Ramp(int n) {
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 0.0f);
  return x;
}

TEST(KernelEngineTest, BlockSumsThroughShufflesAndBarriers) {
  DeviceArray<float> x(Ramp(4 * 256)), out(std::vector<float>(4, -1));
  LaunchKernel(BlockSumKernel, 4, 256, 0, nullptr, x.get(), out.get());
  const std::vector<float> got = out.Read();
  for (int b = 0; b < 4; ++b) {
    const float first = 256.0f * b, last = first + 255;
    EXPECT_EQ(got[b], (first + last) * 128) << "block " << b;  // exact: integers below 2^24
  }
}

TEST(KernelEngineTest, AMissingBarrierGivesAWrongSum) {
  DeviceArray<float> x(Ramp(8 * 256)), out(std::vector<float>(8, -1));
  LaunchKernel(RacyBlockSumKernel, 8, 256, 0, nullptr, x.get(), out.get());
  const std::vector<float> got = out.Read();
  int wrong = 0;
  for (int b = 0; b < 8; ++b) wrong += got[b] != (512.0f * b + 255) * 128;
  EXPECT_GT(wrong, 0) << "the threads' shuffled order should expose the missing __syncthreads";
}

__global__ void FillKernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = value;
  }
}

// The emulator's stream threads run beside the test: death tests re-execute.
class KernelEngineDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(KernelEngineDeathTest, GridYAbove65535IsRefused) {
  DeviceArray<float> out(std::vector<float>(4, 0));
  EXPECT_DEATH(
      LaunchKernel(FillKernel, dim3(1, 70000), 32, 0, nullptr, out.get(), int64_t{4}, 1.0f),
      "grid y of 70000 is outside \\[1, 65535\\].*cudaErrorInvalidConfiguration");
}

TEST_F(KernelEngineDeathTest, MoreThan1024ThreadsAreRefused) {
  DeviceArray<float> out(std::vector<float>(4, 0));
  EXPECT_DEATH(LaunchKernel(FillKernel, 1, dim3(64, 32), 0, nullptr, out.get(), int64_t{4}, 1.0f),
               "2048 threads per block, above 1024");
}

__global__ void DynamicSharedKernel(float* out) {
  TETRA_DYNAMIC_SHARED(float, scratch);
  scratch[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

TEST_F(KernelEngineDeathTest, DynamicSharedMemoryPast48KiBNeedsTheAttribute) {
  DeviceArray<float> out(std::vector<float>(64, 0));
  EXPECT_DEATH(LaunchKernel(DynamicSharedKernel, 1, 64, 64 << 10, nullptr, out.get()),
               "65536 bytes of dynamic shared memory, above the kernel's limit of 49152");
  EXPECT_EQ(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 << 10),
            cudaErrorInvalidValue);
  cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 64 << 10),
            cudaSuccess);
  LaunchKernel(DynamicSharedKernel, 1, 64, 64 << 10, nullptr, out.get());
  const std::vector<float> got = out.Read();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], 63 - i);
}

__global__ void ShuffleAfterExitKernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST_F(KernelEngineDeathTest, AShuffleWaitingForAnExitedLaneFails) {
  DeviceArray<float> out(std::vector<float>(32, 0));
  EXPECT_DEATH(
      {
        LaunchKernel(ShuffleAfterExitKernel, 1, 32, 0, nullptr, out.get());
        cudaDeviceSynchronize();
      },
      "__shfl_xor_sync of thread .* names lane 5 in mask 0xffffffff, which has exited");
}

__global__ void MaskWithoutMeKernel(float* out) { out[threadIdx.x] = __shfl_sync(0x1u, 1.0f, 0); }

TEST_F(KernelEngineDeathTest, AMaskLeavingTheCallerOutFails) {
  DeviceArray<float> out(std::vector<float>(32, 0));
  EXPECT_DEATH(
      {
        LaunchKernel(MaskWithoutMeKernel, 1, 32, 0, nullptr, out.get());
        cudaDeviceSynchronize();
      },
      "has mask 0x1, which leaves the lane out");
}

__global__ void VectorCopyKernel(const float* in, float* out) { StoreVector(out, LoadVector(in)); }

TEST_F(KernelEngineDeathTest, AMisaligned16ByteLoadFails) {
  DeviceArray<float> in(std::vector<float>(8, 1)), out(std::vector<float>(8, 0));
  EXPECT_DEATH(
      {
        LaunchKernel(VectorCopyKernel, 1, 1, 0, nullptr, in.get() + 1, out.get());
        cudaDeviceSynchronize();
      },
      "misaligned 16-byte load at 0x[0-9a-f]+ \\(4 bytes past a 16-byte boundary\\).*kernel "
      "tetra::cuda::VectorCopyKernel");
}

TEST_F(KernelEngineDeathTest, AWriteOnePastADeviceAllocationFails) {
  DeviceArray<float> out(std::vector<float>(10, 0));
  EXPECT_DEATH(
      {
        LaunchKernel(FillKernel, 1, 32, 0, nullptr, out.get(), int64_t{11}, 1.0f);
        cudaDeviceSynchronize();
      },
      "a write past the end of the 40-byte device allocation at 0x[0-9a-f]+: byte 40");
}

TEST_F(KernelEngineDeathTest, AWriteFarPastADeviceAllocationIsAnIllegalAddress) {
  DeviceArray<float> out(std::vector<float>(1024, 0));  // 4 KiB: a page, then the guard page
  EXPECT_DEATH(
      {
        LaunchKernel(FillKernel, 1, 32, 0, nullptr, out.get(), int64_t{2048}, 1.0f);
        cudaDeviceSynchronize();
      },
      "illegal address 0x[0-9a-f]+ .* in kernel tetra::cuda::FillKernel, thread \\([0-9]+, 0, "
      "0\\) of block \\(0, 0, 0\\)");
}

TEST_F(KernelEngineDeathTest, ACopyWhosePointersDoNotMatchItsKindFails) {
  DeviceArray<float> device(std::vector<float>(4, 0));
  std::vector<float> host(4);
  EXPECT_DEATH(cudaMemcpy(host.data(), device.get(), 16, cudaMemcpyHostToDevice),
               "cudaMemcpyHostToDevice from 0x[0-9a-f]+ \\(device memory\\) to 0x[0-9a-f]+ "
               "\\(pageable host memory\\): the pointers do not match the kind");
}

// Holds its stream until the host sets *gate.
__global__ void WaitForHostKernel(int* gate) {
  while (std::atomic_ref<int>(*gate).load() == 0) {
  }
}

TEST(KernelEngineTest, AHostReadThatDoesNotWaitSeesStaleData) {
  DeviceArray<float> device(std::vector<float>(1, 42));
  int* gate = nullptr;
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&gate), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float)), cudaSuccess);
  *gate = 0;
  *pinned = -1;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  LaunchKernel(WaitForHostKernel, 1, 1, 0, stream, gate);
  ASSERT_EQ(cudaMemcpyAsync(pinned, device.get(), sizeof(float), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  EXPECT_EQ(*pinned, -1) << "the copy is asynchronous: nothing has waited for it";
  std::atomic_ref<int>(*gate).store(1);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(*pinned, 42);
  cudaStreamDestroy(stream);
  cudaFreeHost(gate);
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace tetra::cuda
