#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::ProbeLoss;
using ::tetra::testing::RandomVector;

// The lookup is linear in the table: central differences are exact up to fp32
// rounding of the probed loss (~1e-6 relative), summed over repeated tokens.
constexpr ::tetra::testing::GradCheckOptions kGradOptions = {
    .step = 1e-2, .rel_tol = 1e-3, .abs_tol = 1e-3, .max_checks = 1000};

// Token ids with repeats (3 appears three times, 0 twice) and unused rows (5, 6).
const std::vector<int32_t> kTokens = {3, 0, 3, 1, 4, 3, 0, 2, 1};
constexpr int64_t kVocab = 7;
constexpr int64_t kDim = 20;  // not a multiple of 16: threads get unequal column slices

TEST(EmbeddingTest, ForwardCopiesTableRows) {
  const std::vector<float> table = RandomVector(kVocab * kDim, 1);
  std::vector<float> out(kTokens.size() * kDim);
  EmbeddingForward(kTokens.data(), kTokens.size(), table.data(), kVocab, kDim, out.data());
  for (size_t i = 0; i < kTokens.size(); ++i) {
    for (int64_t j = 0; j < kDim; ++j) {
      ASSERT_EQ(out[i * kDim + j], table[kTokens[i] * kDim + j]) << "token " << i << " dim " << j;
    }
  }
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const int64_t n = kTokens.size();
  std::vector<float> table = RandomVector(kVocab * kDim, 2);
  const std::vector<float> probe = RandomVector(n * kDim, 3);
  auto loss = [&] {
    std::vector<float> out(n * kDim);
    EmbeddingForward(kTokens.data(), n, table.data(), kVocab, kDim, out.data());
    return ProbeLoss(out.data(), probe);
  };
  // Accumulates: start from an earlier micro-batch's gradient.
  const std::vector<float> before = RandomVector(kVocab * kDim, 4);
  std::vector<float> dtable = before;
  EmbeddingBackward(kTokens.data(), n, probe.data(), kVocab, kDim, dtable.data());
  std::vector<float> added(kVocab * kDim);
  for (int64_t i = 0; i < kVocab * kDim; ++i) added[i] = dtable[i] - before[i];
  ExpectGradientMatches("dtable", table.data(), kVocab * kDim, added.data(), loss, kGradOptions);
}

TEST(EmbeddingTest, BackwardIsBitIdenticalAcrossRunsAndThreadCounts) {
  const int64_t n = 521, dim = 72, vocab = 13;  // above kMinParallelWork
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * i * 7 + 3) % vocab);
  const std::vector<float> dout = RandomVector(n * dim, 5);
  const int saved_threads = CpuThreads();
  std::vector<std::vector<float>> results;
  for (int threads : {2, 2, 1, 3}) {
    SetCpuThreads(threads);
    std::vector<float> dtable(vocab * dim, 0.25f);
    EmbeddingBackward(tokens.data(), n, dout.data(), vocab, dim, dtable.data());
    results.push_back(dtable);
  }
  SetCpuThreads(saved_threads);
  for (size_t r = 1; r < results.size(); ++r) {
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)),
              0)
        << "run " << r;
  }
}

TEST(EmbeddingDeathTest, TokenOutsideTableIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> table = RandomVector(kVocab * kDim, 6);
  std::vector<float> rows(kTokens.size() * kDim);
  std::vector<float> dtable(kVocab * kDim);
  std::vector<int32_t> tokens = kTokens;
  tokens[4] = kVocab;  // one past the last row
  EXPECT_DEATH(
      EmbeddingForward(tokens.data(), tokens.size(), table.data(), kVocab, kDim, rows.data()),
      "token id 7 at 4 outside");
  EXPECT_DEATH(
      EmbeddingBackward(tokens.data(), tokens.size(), rows.data(), kVocab, kDim, dtable.data()),
      "token id 7 at 4 outside");
  tokens[4] = -1;
  EXPECT_DEATH(
      EmbeddingForward(tokens.data(), tokens.size(), table.data(), kVocab, kDim, rows.data()),
      "token id -1 at 4 outside");
}

// The op API passes the table's row count down: ops::Embedding checks the same.
TEST(EmbeddingDeathTest, OpChecksTokensAgainstTableRows) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor tokens = Tensor::Empty({static_cast<int64_t>(kTokens.size())}, DType::kI32);
  std::copy(kTokens.begin(), kTokens.end(), tokens.data<int32_t>());
  tokens.data<int32_t>()[2] = kVocab;
  const Tensor table = Tensor::Zeros({kVocab, kDim});
  const Tensor out = Tensor::Empty({tokens.numel(), kDim});
  EXPECT_DEATH(ops::Embedding(tokens, table, out), "token id 7 at 2 outside");
  EXPECT_DEATH(ops::EmbeddingBackward(tokens, out, table), "token id 7 at 2 outside");
}

}  // namespace
}  // namespace tetra::cpu
