// Embedding lookup and gradient scatter (whole table and one vocabulary
// shard) on the device against the CPU kernels.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// The lookup copies values: exact. The scatter adds the same values in
// another order (atomics): a token repeated r times sums r terms, ~r ulp.
constexpr Tolerance kExact{0.0, 0.0};
constexpr Tolerance kScatterTol{1e-6, 1e-6};

constexpr int64_t kVocab = 50, kDim = 40, kTokens = 97;

Tensor Tokens() {  // every id of the vocabulary, many repeated
  Tensor t = Tensor::Empty({kTokens}, DType::kI32);
  for (int64_t i = 0; i < kTokens; ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % kVocab);
  return t;
}

Tensor TokensOnDevice(const Tensor& host) {
  Tensor d = Tensor::Empty(host.shape(), DType::kI32, DeviceType::kCUDA);
  d.CopyFrom(host);
  return d;
}

TEST(EmbeddingGpuTest, LookupAndScatterMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const Tensor tokens = Tokens(), tokens_d = TokensOnDevice(tokens);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor table = testing::RoundTo(testing::HostRandom({kVocab, kDim}, 1), dtype);
    Tensor out = Tensor::Empty({kTokens, kDim});
    ops::Embedding(tokens, table, out);
    const Tensor out_d = Tensor::Empty({kTokens, kDim}, dtype, DeviceType::kCUDA);
    ops::Embedding(tokens_d, testing::ToDevice(table, dtype), out_d);
    testing::ExpectClose("out", testing::ToHostF32(out_d), out, kExact);

    const Tensor dout = testing::RoundTo(testing::HostRandom({kTokens, kDim}, 2), dtype);
    const Tensor dtable0 = testing::HostRandom({kVocab, kDim}, 3);
    const Tensor dtable = dtable0.Clone();
    ops::EmbeddingBackward(tokens, dout, dtable);
    const Tensor dtable_d = testing::ToDevice(dtable0);
    ops::EmbeddingBackward(tokens_d, testing::ToDevice(dout, dtype), dtable_d);
    testing::ExpectClose("dtable", testing::ToHostF32(dtable_d), dtable, kScatterTol);
  }
}

TEST(EmbeddingGpuTest, ShardMatchesCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const Tensor tokens = Tokens(), tokens_d = TokensOnDevice(tokens);
  const int64_t begin = 20, rows = 15;  // ids [20, 35) live here
  const Tensor table = testing::HostRandom({rows, kDim}, 1);
  Tensor out = Tensor::Empty({kTokens, kDim});
  ops::EmbeddingShard(tokens, table, begin, out);
  const Tensor out_d = Tensor::Empty({kTokens, kDim}, DType::kF32, DeviceType::kCUDA);
  ops::EmbeddingShard(tokens_d, testing::ToDevice(table), begin, out_d);
  testing::ExpectClose("out", testing::ToHostF32(out_d), out, kExact);

  const Tensor dout = testing::HostRandom({kTokens, kDim}, 2);
  const Tensor dtable = Tensor::Zeros({rows, kDim});
  ops::EmbeddingShardBackward(tokens, dout, begin, dtable);
  const Tensor dtable_d = Tensor::Zeros({rows, kDim}, DType::kF32, DeviceType::kCUDA);
  ops::EmbeddingShardBackward(tokens_d, testing::ToDevice(dout), begin, dtable_d);
  testing::ExpectClose("dtable", testing::ToHostF32(dtable_d), dtable, kScatterTol);
}

}  // namespace
}  // namespace tetra
