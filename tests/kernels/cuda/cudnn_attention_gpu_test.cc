// cuDNN's fused attention (kernels/cuda/cudnn_attention.h) on the GPU, where
// libcudnn loads: it takes the shapes the GPU benchmarks train (so their
// speed path really is cuDNN) and MLA's head dims, each against the CPU
// reference within the op table's bf16 tolerances, and its backward is
// deterministic. The op table's small attention cases run it too.
#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/cudnn_attention.h"
#include "tests/kernels/op_cases.h"
#include "tests/testing/gpu.h"

namespace tetra {
namespace {

using testing::Backend;
using testing::HostRandom;

#define TETRA_SKIP_WITHOUT_CUDNN() \
  TETRA_SKIP_WITHOUT_GPU();        \
  if (!cuda::CudnnLoaded()) GTEST_SKIP() << "libcudnn.so.9 is not loadable (see the log)"

// Whether cuDNN, not our own kernel, runs the forward and backward of `s`.
void ExpectCudnnRuns(const AttentionShape& s) {
  const Backend gpu = Backend::InCaseDtype(DeviceType::kCUDA);
  const DType bf16 = DType::kBF16;
  const Shape q_shape = {s.batch, s.seq, s.q_heads, s.head_dim};
  const Shape k_shape = {s.batch, s.keys(), s.kv_heads, s.head_dim};
  const Shape v_shape = {s.batch, s.keys(), s.kv_heads, s.value_dim()};
  const Shape out_shape = {s.batch, s.seq, s.q_heads, s.value_dim()};
  const Tensor q = gpu.In(HostRandom(q_shape, 1), bf16), k = gpu.In(HostRandom(k_shape, 2), bf16),
               v = gpu.In(HostRandom(v_shape, 3), bf16),
               dout = gpu.In(HostRandom(out_shape, 4), bf16);
  const Tensor out = gpu.Out(out_shape, bf16), lse = gpu.Out({s.batch, s.q_heads, s.seq});
  std::string why;
  EXPECT_TRUE(cuda::CudnnAttention(s, q, k, v, out, lse, &why)) << "forward: " << why;
  const Tensor dq = gpu.Out(q_shape, bf16), dk = gpu.Out(k_shape, bf16),
               dv = gpu.Out(v_shape, bf16);
  EXPECT_TRUE(cuda::CudnnAttentionBackward(s, dout, q, k, v, out, lse, dq, dk, dv, &why))
      << "backward: " << why;
}

void ExpectMatchesTheCpu(const AttentionShape& s) {
  const testing::OpCase c = testing::AttentionCase(s, DType::kBF16);
  SCOPED_TRACE(c.name);
  ExpectCudnnRuns(s);
  testing::ExpectOutputsMatch(testing::Run(c, Backend::InCaseDtype(DeviceType::kCUDA)),
                              testing::Run(c, Backend::Reference()));
}

TEST(CudnnAttentionGpuTest, RunsTheDenseBenchmarksShape) {
  TETRA_SKIP_WITHOUT_CUDNN();
  // configs/bench_h200_1b.textproto: 32 query heads over 8 kv heads of 64, T 2048.
  ExpectMatchesTheCpu({.batch = 1, .seq = 2048, .q_heads = 32, .kv_heads = 8, .head_dim = 64});
}

TEST(CudnnAttentionGpuTest, RunsTheMoeBenchmarksShape) {
  TETRA_SKIP_WITHOUT_CUDNN();
  // configs/bench_h200_moe.textproto: 12 query heads over 4 kv heads of 128
  // (T 2048 there; shorter here to keep the CPU reference quick).
  ExpectMatchesTheCpu({.batch = 2, .seq = 1024, .q_heads = 12, .kv_heads = 4, .head_dim = 128});
}

TEST(CudnnAttentionGpuTest, RunsMlaHeadDims) {
  TETRA_SKIP_WITHOUT_CUDNN();
  // DeepSeek-V3: queries and keys of 192 (128 + 64 rotary), values of 128,
  // past what our own kernel takes (128).
  ExpectMatchesTheCpu(
      {.batch = 1, .seq = 256, .q_heads = 4, .kv_heads = 4, .head_dim = 192, .v_head_dim = 128});
}

TEST(CudnnAttentionGpuTest, RunsRingAttentionBlocks) {
  TETRA_SKIP_WITHOUT_CUDNN();
  // Context parallelism's blocks: a chunk's queries over another rank's
  // chunk of keys, all visible; chunks of one length, and of two.
  ExpectMatchesTheCpu(
      {.batch = 1, .seq = 512, .q_heads = 8, .kv_heads = 2, .head_dim = 64, .causal = false});
  ExpectMatchesTheCpu({.batch = 2,
                       .seq = 256,
                       .q_heads = 4,
                       .kv_heads = 4,
                       .head_dim = 128,
                       .kv_seq = 384,
                       .causal = false});
}

TEST(CudnnAttentionGpuTest, BackwardIsDeterministic) {
  TETRA_SKIP_WITHOUT_CUDNN();
  const AttentionShape s{.batch = 2, .seq = 512, .q_heads = 8, .kv_heads = 2, .head_dim = 64};
  ExpectCudnnRuns(s);
  const testing::OpCase c = testing::AttentionCase(s, DType::kBF16);
  const testing::Outputs first = testing::Run(c, Backend::InCaseDtype(DeviceType::kCUDA));
  const testing::Outputs second = testing::Run(c, Backend::InCaseDtype(DeviceType::kCUDA));
  ASSERT_EQ(first.all().size(), second.all().size());
  for (size_t o = 0; o < first.all().size(); ++o) {
    EXPECT_EQ(first.all()[o].values, second.all()[o].values)
        << first.all()[o].name << " differs between runs";
  }
}

// Where neither engine takes a call (fp32 never goes to cuDNN; tetra's own
// kernel stops at head dims of 128), the error names both reasons and the
// fix, instead of the own kernel's bare check.
TEST(AttentionEngineGpuDeathTest, NoEngineForAShapeSaysWhyAndHowToFixIt) {
  TETRA_SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts its own CUDA context
  const Backend gpu = Backend::InCaseDtype(DeviceType::kCUDA);
  const AttentionShape s{
      .batch = 1, .seq = 16, .q_heads = 2, .kv_heads = 2, .head_dim = 192, .v_head_dim = 128};
  const Tensor q = gpu.Out({1, 16, 2, 192}), k = gpu.Out({1, 16, 2, 192}),
               v = gpu.Out({1, 16, 2, 128});
  const Tensor out = gpu.Out({1, 16, 2, 128}), lse = gpu.Out({1, 2, 16});
  EXPECT_DEATH(
      ops::Attention(s, q, k, v, out, lse),
      "no engine runs attention forward .*cuDNN did not take it .*own kernel takes head dims up to "
      "128.*hint: install cuDNN 9");
}

}  // namespace
}  // namespace tetra
