// Flash-style causal GQA attention on the device, forward (out, lse) and
// backward (dq, dk, dv), against the CPU kernel on the same inputs. The
// backward of both sides reads the CPU forward's out (rounded to the dtype)
// and lse, so each comparison isolates one kernel.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// fp32: dot products of D <= 40 terms and softmax sums over <= 70 keys in
// different orders, and CUDA's expf (2 ulp) against the CPU's polynomial:
// a few 1e-7; gradients sum P * (dP - delta) over keys and query heads.
constexpr Tolerance kForwardTol{1e-5, 1e-5};
constexpr Tolerance kBackwardTol{1e-5, 1e-4};
// bf16: identical inputs, fp32 arithmetic, then one output rounding (2^-9).
constexpr Tolerance kBf16Tol{1e-4, 4e-3};

const AttentionShape kShapes[] = {
    {.batch = 2, .seq = 45, .q_heads = 4, .kv_heads = 2, .head_dim = 16},
    {.batch = 1, .seq = 70, .q_heads = 3, .kv_heads = 1, .head_dim = 40},
    {.batch = 1, .seq = 33, .q_heads = 2, .kv_heads = 2, .head_dim = 128},
};

TEST(AttentionGpuTest, ForwardAndBackwardMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  for (const AttentionShape& s : kShapes) {
    const Shape q_shape = {s.batch, s.seq, s.q_heads, s.head_dim};
    const Shape kv_shape = {s.batch, s.seq, s.kv_heads, s.head_dim};
    const Shape lse_shape = {s.batch, s.q_heads, s.seq};
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " T", s.seq, " Hq", s.q_heads, " Hkv",
                                s.kv_heads, " D", s.head_dim));
      const bool fp32 = dtype == DType::kF32;
      const Tensor q = testing::RoundTo(testing::HostRandom(q_shape, 1), dtype);
      const Tensor k = testing::RoundTo(testing::HostRandom(kv_shape, 2), dtype);
      const Tensor v = testing::RoundTo(testing::HostRandom(kv_shape, 3), dtype);
      const Tensor dout = testing::RoundTo(testing::HostRandom(q_shape, 4), dtype);
      Tensor out = Tensor::Empty(q_shape), lse = Tensor::Empty(lse_shape);
      ops::Attention(s, q, k, v, out, lse);

      const Tensor q_d = testing::ToDevice(q, dtype), k_d = testing::ToDevice(k, dtype),
                   v_d = testing::ToDevice(v, dtype);
      const Tensor out_d = Tensor::Empty(q_shape, dtype, DeviceType::kCUDA);
      const Tensor lse_d = Tensor::Empty(lse_shape, DType::kF32, DeviceType::kCUDA);
      ops::Attention(s, q_d, k_d, v_d, out_d, lse_d);
      testing::ExpectClose("out", testing::ToHostF32(out_d), out, fp32 ? kForwardTol : kBf16Tol);
      testing::ExpectClose("lse", testing::ToHostF32(lse_d), lse, kForwardTol);

      const Tensor out_r = testing::RoundTo(out, dtype);
      Tensor dq = Tensor::Empty(q_shape), dk = Tensor::Empty(kv_shape), dv = Tensor::Empty(kv_shape);
      ops::AttentionBackward(s, dout, q, k, v, out_r, lse, dq, dk, dv);
      const Tensor dq_d = Tensor::Empty(q_shape, dtype, DeviceType::kCUDA);
      const Tensor dk_d = Tensor::Empty(kv_shape, dtype, DeviceType::kCUDA);
      const Tensor dv_d = Tensor::Empty(kv_shape, dtype, DeviceType::kCUDA);
      ops::AttentionBackward(s, testing::ToDevice(dout, dtype), q_d, k_d, v_d,
                             testing::ToDevice(out_r, dtype), testing::ToDevice(lse), dq_d, dk_d,
                             dv_d);
      const Tolerance tol = fp32 ? kBackwardTol : kBf16Tol;
      testing::ExpectClose("dq", testing::ToHostF32(dq_d), dq, tol);
      testing::ExpectClose("dk", testing::ToHostF32(dk_d), dk, tol);
      testing::ExpectClose("dv", testing::ToHostF32(dv_d), dv, tol);
    }
  }
}

}  // namespace
}  // namespace tetra
