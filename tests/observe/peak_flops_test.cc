#include "observe/peak_flops.h"

#include "gtest/gtest.h"

namespace tetra {
namespace {

// Names as cudaGetDeviceProperties reports them; figures from NVIDIA's data
// sheets (dense bf16 tensor-core peak, plain fp32 peak).
TEST(PeakFlopsTest, KnowsTheTrainingGpus) {
  EXPECT_EQ(DevicePeakTflops("NVIDIA A100-SXM4-80GB").bf16, 312);
  EXPECT_EQ(DevicePeakTflops("NVIDIA A100 80GB PCIe").bf16, 312);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H100 80GB HBM3").bf16, 989);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H100 PCIe").bf16, 756);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H800").bf16, 989);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H200").bf16, 989);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H200").fp32, 67);
  EXPECT_EQ(DevicePeakTflops("NVIDIA A100-SXM4-40GB").fp32, 19.5);
}

TEST(PeakFlopsTest, UnknownDeviceHasNoPeak) {
  EXPECT_EQ(DevicePeakTflops("NVIDIA GeForce RTX 4090").bf16, 0);
  EXPECT_EQ(DevicePeakTflops("").fp32, 0);
}

}  // namespace
}  // namespace tetra
