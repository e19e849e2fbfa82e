#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"

namespace tetra::cpu {
namespace {

using ::tetra::testing::ExpectGradientMatches;
using ::tetra::testing::RandomVector;

constexpr int64_t kRows = 5;
constexpr int64_t kVocab = 11;
const std::vector<int32_t> kTargets = {3, 0, 10, 3, 7};
constexpr float kGradScale = 0.37f;  // e.g. 1 / (global token count)

struct Tolerances {
  // Per-row loss vs double log-sum-exp: fp32 exp within ~1.5 ulp, so the sum
  // of exps, hence the log, is off by ~2e-7 relative; the loss is O(3).
  double loss_abs;
  // Softmax is smooth; with h = 1e-2 on O(1) logits the central-difference
  // truncation error is ~1e-5, fp32 noise in the double loss ~1e-6 / h.
  ::tetra::testing::GradCheckOptions grad;
};
constexpr Tolerances kTol = {
    .loss_abs = 2e-6, .grad = {.step = 1e-2, .rel_tol = 2e-3, .abs_tol = 2e-4, .max_checks = 1000}};

// -log softmax(x)[target], straight from the definition in double.
double DirectRowLoss(const float* x, int64_t vocab, int32_t target) {
  double sum = 0;
  for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(x[j]));
  return std::log(sum) - x[target];
}

TEST(CrossEntropyTest, LossMatchesDirectLogSumExp) {
  const std::vector<float> logits = RandomVector(kRows * kVocab, 1, 3.0f);
  std::vector<float> row_losses(kRows);
  const double total = CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                   kVocab, 1.0f, nullptr, row_losses.data());
  double expected_total = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    const double expected = DirectRowLoss(logits.data() + r * kVocab, kVocab, kTargets[r]);
    EXPECT_NEAR(row_losses[r], expected, kTol.loss_abs) << "row " << r;
    expected_total += expected;
  }
  EXPECT_NEAR(total, expected_total, kRows * kTol.loss_abs);
}

TEST(CrossEntropyTest, LargeLogitsAreStable) {
  // exp(1000) overflows fp32 and double; the max-subtracted form does not care.
  std::vector<float> logits = RandomVector(kRows * kVocab, 2);
  std::vector<float> shifted = logits;
  for (float& x : shifted) x += 1000.0f;
  const double loss = CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                  kVocab, 1.0f, nullptr, nullptr);
  std::vector<float> dlogits(kRows * kVocab);
  const double shifted_loss = CrossEntropyForwardBackward(
      shifted.data(), kTargets.data(), kRows, kVocab, kVocab, 1.0f, dlogits.data(), nullptr);
  ASSERT_TRUE(std::isfinite(shifted_loss));
  // fp32 logits near 1000 are spaced 6e-5 apart, so the shift itself rounds.
  EXPECT_NEAR(shifted_loss, loss, kRows * 1e-4);
  for (float d : dlogits) EXPECT_TRUE(std::isfinite(d));
}

TEST(CrossEntropyTest, GradientMatchesFiniteDifferencesAndWorksInPlace) {
  std::vector<float> logits = RandomVector(kRows * kVocab, 3, 2.0f);
  auto loss = [&] {
    return kGradScale * CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                    kVocab, 1.0f, nullptr, nullptr);
  };
  std::vector<float> dlogits(kRows * kVocab);
  const double total = CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                   kVocab, kGradScale, dlogits.data(), nullptr);
  ExpectGradientMatches("dlogits", logits.data(), kRows * kVocab, dlogits.data(), loss, kTol.grad);
  // Each row of softmax - onehot sums to 0.
  for (int64_t r = 0; r < kRows; ++r) {
    double row_sum = 0;
    for (int64_t j = 0; j < kVocab; ++j) row_sum += dlogits[r * kVocab + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << r;
  }

  // In place: the gradient overwrites the logits, with the same loss and values.
  std::vector<float> buffer = logits;
  const double in_place_total = CrossEntropyForwardBackward(
      buffer.data(), kTargets.data(), kRows, kVocab, kVocab, kGradScale, buffer.data(), nullptr);
  EXPECT_EQ(in_place_total, total);
  EXPECT_EQ(buffer, dlogits);
}

// The vocabulary-parallel pieces over the whole vocabulary give the fused
// kernel's numbers bit for bit (one arithmetic); over two slices, combined as
// parallel/vocab_parallel_cross_entropy.cc combines them (max of the maxima,
// the owning slice's target logit, the sums added in slice order), the same
// loss and gradient up to the regrouped sum of exps.
TEST(CrossEntropyTest, PiecesGiveTheFusedNumbers) {
  const std::vector<float> logits = RandomVector(kRows * kVocab, 2, 3.0f);
  std::vector<float> fused_grad(kRows * kVocab);
  const double fused = CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                   kVocab, kGradScale, fused_grad.data(), nullptr);

  std::vector<float> row_max(kRows), target_logit(kRows), grad(kRows * kVocab);
  std::vector<double> sums(kRows);
  CrossEntropyRowStats(logits.data(), kTargets.data(), kRows, kVocab, 0, kVocab, row_max.data(),
                       target_logit.data());
  CrossEntropySumExp(logits.data(), row_max.data(), kRows, kVocab, 0, kVocab, sums.data());
  EXPECT_EQ(
      CrossEntropyLoss(kTargets.data(), row_max.data(), target_logit.data(), sums.data(), kRows),
      fused);
  CrossEntropyGradient(logits.data(), kTargets.data(), row_max.data(), sums.data(), kRows, kVocab,
                       0, kVocab, kGradScale, grad.data());
  EXPECT_EQ(grad, fused_grad);

  // Two slices: ids [0, 6) and [6, 11).
  constexpr int64_t kSplit = 6;
  const int64_t widths[2] = {kSplit, kVocab - kSplit};
  std::vector<std::vector<float>> slices(2);
  for (int64_t r = 0; r < kRows; ++r) {
    slices[0].insert(slices[0].end(), logits.begin() + r * kVocab,
                     logits.begin() + r * kVocab + kSplit);
    slices[1].insert(slices[1].end(), logits.begin() + r * kVocab + kSplit,
                     logits.begin() + (r + 1) * kVocab);
  }
  std::vector<float> max(kRows, -INFINITY), target(kRows, 0.0f);
  for (int s = 0; s < 2; ++s) {
    std::vector<float> m(kRows), t(kRows);
    CrossEntropyRowStats(slices[s].data(), kTargets.data(), kRows, widths[s], s * kSplit, kVocab,
                         m.data(), t.data());
    for (int64_t r = 0; r < kRows; ++r) max[r] = std::max(max[r], m[r]), target[r] += t[r];
  }
  std::vector<double> sum(kRows, 0.0);
  for (int s = 0; s < 2; ++s) {
    std::vector<double> part(kRows);
    CrossEntropySumExp(slices[s].data(), max.data(), kRows, widths[s], s * kSplit, kVocab,
                       part.data());
    for (int64_t r = 0; r < kRows; ++r) sum[r] += part[r];
  }
  EXPECT_NEAR(CrossEntropyLoss(kTargets.data(), max.data(), target.data(), sum.data(), kRows),
              fused, 1e-12 * std::fabs(fused));
  for (int s = 0; s < 2; ++s) {
    std::vector<float> d(slices[s].size());
    CrossEntropyGradient(slices[s].data(), kTargets.data(), max.data(), sum.data(), kRows,
                         widths[s], s * kSplit, kVocab, kGradScale, d.data());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < widths[s]; ++j) {
        EXPECT_NEAR(d[r * widths[s] + j], fused_grad[r * kVocab + s * kSplit + j], 1e-7f)
            << r << " " << j;
      }
    }
  }
}

// A padded vocabulary: columns past vocab_size are left out of the softmax
// (here they hold logits that would dominate it) and get gradient 0, and the
// real columns' loss and gradient are the unpadded row's, bit for bit.
TEST(CrossEntropyTest, PaddingColumnsAreLeftOut) {
  constexpr int64_t kWidth = kVocab + 5;
  const std::vector<float> logits = RandomVector(kRows * kVocab, 5, 3.0f);
  std::vector<float> padded(kRows * kWidth, 50.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    std::copy(logits.begin() + r * kVocab, logits.begin() + (r + 1) * kVocab,
              padded.begin() + r * kWidth);
  }
  std::vector<float> grad(kRows * kVocab), padded_grad(kRows * kWidth, NAN);
  const double loss = CrossEntropyForwardBackward(logits.data(), kTargets.data(), kRows, kVocab,
                                                  kVocab, kGradScale, grad.data(), nullptr);
  EXPECT_EQ(CrossEntropyForwardBackward(padded.data(), kTargets.data(), kRows, kWidth, kVocab,
                                        kGradScale, padded_grad.data(), nullptr),
            loss);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < kWidth; ++j) {
      EXPECT_EQ(padded_grad[r * kWidth + j], j < kVocab ? grad[r * kVocab + j] : 0.0f)
          << r << " " << j;
    }
  }

  // Three slices of 6 (ids [0, 6), [6, 12), [12, 18)): the second holds 5
  // real ids, the third none; combined as the tensor-parallel loss combines them.
  constexpr int64_t kSlice = 6, kSlices = 3;
  std::vector<float> max(kRows, -INFINITY), target(kRows, 0.0f);
  std::vector<double> sum(kRows, 0.0);
  std::vector<std::vector<float>> slices(kSlices);
  for (int64_t s = 0; s < kSlices; ++s) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = s * kSlice; j < (s + 1) * kSlice; ++j) {
        slices[s].push_back(j < kWidth ? padded[r * kWidth + j] : 50.0f);
      }
    }
    std::vector<float> m(kRows), t(kRows);
    CrossEntropyRowStats(slices[s].data(), kTargets.data(), kRows, kSlice, s * kSlice, kVocab,
                         m.data(), t.data());
    for (int64_t r = 0; r < kRows; ++r) max[r] = std::max(max[r], m[r]), target[r] += t[r];
  }
  for (int64_t s = 0; s < kSlices; ++s) {
    std::vector<double> part(kRows);
    CrossEntropySumExp(slices[s].data(), max.data(), kRows, kSlice, s * kSlice, kVocab,
                       part.data());
    for (int64_t r = 0; r < kRows; ++r) sum[r] += part[r];
  }
  EXPECT_NEAR(CrossEntropyLoss(kTargets.data(), max.data(), target.data(), sum.data(), kRows), loss,
              1e-12 * std::fabs(loss));
  for (int64_t s = 0; s < kSlices; ++s) {
    std::vector<float> d(slices[s].size(), NAN);
    CrossEntropyGradient(slices[s].data(), kTargets.data(), max.data(), sum.data(), kRows, kSlice,
                         s * kSlice, kVocab, kGradScale, d.data());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < kSlice; ++j) {
        const int64_t id = s * kSlice + j;
        if (id < kVocab) {
          EXPECT_NEAR(d[r * kSlice + j], grad[r * kVocab + id], 1e-7f) << r << " " << id;
        } else {
          EXPECT_EQ(d[r * kSlice + j], 0.0f) << r << " " << id;
        }
      }
    }
  }
}

TEST(CrossEntropyDeathTest, TargetOutsideVocabularyIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> logits = RandomVector(kRows * kVocab, 4);
  std::vector<int32_t> targets = kTargets;
  targets[2] = kVocab;
  EXPECT_DEATH(CrossEntropyForwardBackward(logits.data(), targets.data(), kRows, kVocab, kVocab,
                                           1.0f, nullptr, nullptr),
               "target 11 of row 2");
}

// Ignored rows (negative targets) add no loss and get zero gradient; the
// other rows' numbers are those of a run without the ignored ones, fused
// and in pieces alike.
TEST(CrossEntropyTest, IgnoredRowsAreLeftOut) {
  const std::vector<float> logits = RandomVector(kRows * kVocab, 5, 3.0f);
  std::vector<int32_t> targets = kTargets;
  targets[1] = kIgnoredTarget;
  targets[4] = -100;  // PyTorch's ignore_index: any negative id
  const std::vector<int64_t> kept = {0, 2, 3};
  std::vector<float> kept_logits, kept_grad(kept.size() * kVocab);
  std::vector<int32_t> kept_targets;
  for (int64_t r : kept) {
    kept_logits.insert(kept_logits.end(), logits.begin() + r * kVocab,
                       logits.begin() + (r + 1) * kVocab);
    kept_targets.push_back(targets[r]);
  }
  const double expected =
      CrossEntropyForwardBackward(kept_logits.data(), kept_targets.data(), kept.size(), kVocab,
                                  kVocab, kGradScale, kept_grad.data(), nullptr);
  std::vector<float> grad(kRows * kVocab, NAN), row_losses(kRows, NAN);
  EXPECT_EQ(CrossEntropyForwardBackward(logits.data(), targets.data(), kRows, kVocab, kVocab,
                                        kGradScale, grad.data(), row_losses.data()),
            expected);
  std::vector<float> row_max(kRows), target_logit(kRows), pieces_grad(kRows * kVocab, NAN);
  std::vector<double> sums(kRows);
  CrossEntropyRowStats(logits.data(), targets.data(), kRows, kVocab, 0, kVocab, row_max.data(),
                       target_logit.data());
  CrossEntropySumExp(logits.data(), row_max.data(), kRows, kVocab, 0, kVocab, sums.data());
  EXPECT_EQ(
      CrossEntropyLoss(targets.data(), row_max.data(), target_logit.data(), sums.data(), kRows),
      expected);
  CrossEntropyGradient(logits.data(), targets.data(), row_max.data(), sums.data(), kRows, kVocab, 0,
                       kVocab, kGradScale, pieces_grad.data());
  size_t next_kept = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    const bool ignored = targets[r] < 0;
    if (ignored) {
      EXPECT_EQ(row_losses[r], 0.0f) << "row " << r;
    }
    for (int64_t j = 0; j < kVocab; ++j) {
      const float want = ignored ? 0.0f : kept_grad[next_kept * kVocab + j];
      EXPECT_EQ(grad[r * kVocab + j], want) << "row " << r << " id " << j;
      EXPECT_EQ(pieces_grad[r * kVocab + j], want) << "row " << r << " id " << j;
    }
    if (!ignored) ++next_kept;
  }
}

}  // namespace
}  // namespace tetra::cpu
