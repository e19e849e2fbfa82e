// RoPE forward and backward on the device against the CPU kernel.
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// Two products and a sum per element with the same fp32 table: the GPU may
// fuse them (FMA), a difference of ~1 ulp.
constexpr Tolerance kFp32Tol{1e-6, 1e-6};
constexpr Tolerance kBf16Tol{1e-6, 4e-3};  // plus one bf16 rounding

TEST(RopeGpuTest, ForwardAndBackwardMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const int64_t batch = 2, seq = 11, heads = 3, head_dim = 16;
  const RopeTable host_table = MakeRopeTable(seq + 5, head_dim, 10000.0);
  RopeTable device_table = host_table;
  device_table.cos = testing::ToDevice(host_table.cos);
  device_table.sin = testing::ToDevice(host_table.sin);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool backward : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (backward ? " backward" : " forward"));
      const Tensor x =
          testing::RoundTo(testing::HostRandom({batch, seq, heads, head_dim}, 1), dtype);
      const Tensor want = x.Clone();
      const Tensor got = testing::ToDevice(x, dtype);
      if (backward) {
        ops::RopeBackward(want, host_table);
        ops::RopeBackward(got, device_table);
      } else {
        ops::Rope(want, host_table);
        ops::Rope(got, device_table);
      }
      testing::ExpectClose("x", testing::ToHostF32(got), want,
                           dtype == DType::kF32 ? kFp32Tol : kBf16Tol);
    }
  }
}

}  // namespace
}  // namespace tetra
