// GradientReducer on the world as the data-parallel group (and on one-rank
// groups), both all-reduce (ZeRO-0) and reduce-scatter (ZeRO-1): bucket
// layout, buckets launched by ReadyFrom in reverse steps, gradients written
// below the ready offset after it is announced, Finish alone, reuse over
// steps. Gradients are small integers, a closed-form function of (rank,
// index, step), so every sum is exact in fp32 and compared bit for bit with
// the sum computed here. Runs under mpirun with 2, 4 and 8 ranks.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"
#include "parallel/gradient_reducer.h"

namespace tetra {
namespace {

// Deadline of every collective: far above their run time with 8 ranks on 2
// cores, far below ctest's TIMEOUT, so a hang fails with the watchdog's message.
constexpr double kTimeoutS = 30;
// Buckets of 0.001 MiB = 262 floats: many buckets even for small buffers.
constexpr double kSmallBucketMb = 0.001;
constexpr double kBigBucketMb = 25;
constexpr int64_t kBytesPerMb = 1024 * 1024;
// Logical sizes before padding: odd, so padding and bucket tails are exercised.
constexpr int64_t kElementCounts[] = {1, 17, 1001, 12345};

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// Each rank alone. Split once, on first use: every rank runs the tests in the
// same order, so the collective Split lines up.
Communicator& Self() {
  static std::unique_ptr<Communicator> self =
      World().Split({World().ranks()[World().rank()]}, "self");
  return *self;
}

// Gradient element `i` of dp rank `r` at `step`: an integer in [-15, 15].
float Grad(int r, int64_t i, int step) {
  return static_cast<float>((i * 7 + r * 13 + step * 5) % 31 - 15);
}

float SummedGrad(int dp_size, int64_t i, int step) {
  float sum = 0;
  for (int r = 0; r < dp_size; ++r) sum += Grad(r, i, step);
  return sum;
}

Tensor FilledGrads(int64_t total, int rank, int step) {
  Tensor grads = Tensor::Empty({total});
  for (int64_t i = 0; i < total; ++i) grads.f32()[i] = Grad(rank, i, step);
  return grads;
}

int BucketsAtOrAbove(const GradientReducer& reducer, int64_t offset) {
  return static_cast<int>(std::count_if(reducer.buckets().begin(), reducer.buckets().end(),
                                        [&](const FlatRange& b) { return b.begin >= offset; }));
}

// Every element this rank owns equals `expected(i)`; reports the first mismatch.
template <typename Expected>
void ExpectOwnedEqual(const GradientReducer& reducer, Expected expected) {
  const float* grads = reducer.flat_grads().f32();
  for (const FlatRange& range : reducer.owned_ranges()) {
    for (int64_t i = range.begin; i < range.end; ++i) {
      ASSERT_EQ(grads[i], expected(i))
          << "element " << i << " of owned [" << range.begin << ", " << range.end << ")";
    }
  }
}

class GradientReducerTest : public testing::TestWithParam<bool> {
 protected:
  bool reduce_scatter() const { return GetParam(); }
};

TEST(GradientReducerPaddingTest, PadsToWholeAlignedBlocksPerRank) {
  const int dp = World().size();
  const int64_t unit = GradientReducer::kBlockAlignment * dp;
  EXPECT_EQ(GradientReducer::PaddedSize(0, dp), 0);
  EXPECT_EQ(GradientReducer::PaddedSize(1, dp), unit);
  EXPECT_EQ(GradientReducer::PaddedSize(unit, dp), unit);
  EXPECT_EQ(GradientReducer::PaddedSize(unit + 1, dp), 2 * unit);
  EXPECT_EQ(GradientReducer::PaddedSize(17, 1), 32);
}

TEST_P(GradientReducerTest, BucketsTileTheBufferInAlignedNearEqualParts) {
  const int dp = World().size();
  const int64_t unit = GradientReducer::kBlockAlignment * (reduce_scatter() ? dp : 1);
  for (double bucket_mb : {kSmallBucketMb, kBigBucketMb}) {
    const int64_t target = std::max<int64_t>(unit, bucket_mb * kBytesPerMb / sizeof(float));
    for (int64_t elements : kElementCounts) {
      const int64_t total = GradientReducer::PaddedSize(elements, dp);
      const GradientReducer reducer(Tensor::Zeros({total}), World(), bucket_mb, reduce_scatter());
      SCOPED_TRACE(testing::Message() << "total " << total << " bucket_mb " << bucket_mb);
      const std::vector<FlatRange>& buckets = reducer.buckets();
      ASSERT_FALSE(buckets.empty());
      int64_t end = 0, smallest = total, largest = 0;
      for (const FlatRange& b : buckets) {
        EXPECT_EQ(b.begin, end);
        EXPECT_GT(b.size(), 0);
        EXPECT_EQ(b.size() % unit, 0);
        EXPECT_LE(b.size(), target);
        smallest = std::min(smallest, b.size());
        largest = std::max(largest, b.size());
        end = b.end;
      }
      EXPECT_EQ(end, total);
      EXPECT_LE(largest - smallest, unit);
      // The fewest buckets that respect the target.
      EXPECT_EQ(static_cast<int64_t>(buckets.size()),
                (total + target / unit * unit - 1) / (target / unit * unit));

      if (!reduce_scatter()) {
        EXPECT_EQ(reducer.owned_ranges(), (std::vector<FlatRange>{{0, total}}));
        continue;
      }
      ASSERT_EQ(reducer.owned_ranges().size(), buckets.size());
      for (size_t b = 0; b < buckets.size(); ++b) {
        const int64_t block = buckets[b].size() / dp;
        EXPECT_EQ(reducer.owned_ranges()[b],
                  (FlatRange{buckets[b].begin + World().rank() * block,
                             buckets[b].begin + (World().rank() + 1) * block}));
        for (int r = 0; r < dp; ++r) {
          EXPECT_EQ(reducer.Block(b, r).begin, buckets[b].begin + r * block);
          EXPECT_EQ(reducer.Block(b, r).size(), block);
        }
      }
    }
  }
}

// Backward announces ever lower offsets; after each announcement it still
// writes gradients below the offset (here: +1 everywhere below it), which the
// sums must include, and only buckets wholly at or above it may be in flight.
TEST_P(GradientReducerTest, ReadyFromInReverseStepsSumsEveryGradient) {
  const int dp = World().size();
  for (int64_t elements : kElementCounts) {
    const int64_t total = GradientReducer::PaddedSize(elements, dp);
    const std::vector<int64_t> ready_offsets = {total * 3 / 4, total / 2, total / 2,
                                                total / 5,     1,         0};
    Tensor grads = Tensor::Empty({total});
    GradientReducer reducer(grads, World(), kSmallBucketMb, reduce_scatter());
    SCOPED_TRACE(testing::Message()
                 << "total " << total << ", " << reducer.buckets().size() << " buckets");
    for (int step = 1; step <= 2; ++step) {  // the second step reuses the reducer
      grads.CopyFrom(FilledGrads(total, World().rank(), step));
      for (int64_t offset : ready_offsets) {
        reducer.ReadyFrom(offset);
        EXPECT_EQ(reducer.buckets_launched(), BucketsAtOrAbove(reducer, offset))
            << "offset " << offset;
        for (int64_t i = 0; i < offset; ++i) grads.f32()[i] += 1;
      }
      reducer.Finish();
      EXPECT_EQ(reducer.buckets_launched(), 0);
      ExpectOwnedEqual(reducer, [&](int64_t i) {
        const auto later = std::count_if(ready_offsets.begin(), ready_offsets.end(),
                                         [&](int64_t offset) { return i < offset; });
        return SummedGrad(dp, i, step) + static_cast<float>(dp * later);
      });
    }
  }
}

TEST_P(GradientReducerTest, FinishAloneSumsEveryGradient) {
  const int dp = World().size();
  for (double bucket_mb : {kSmallBucketMb, kBigBucketMb}) {
    for (int64_t elements : kElementCounts) {
      const int64_t total = GradientReducer::PaddedSize(elements, dp);
      GradientReducer reducer(FilledGrads(total, World().rank(), 1), World(), bucket_mb,
                              reduce_scatter());
      SCOPED_TRACE(testing::Message() << "total " << total << " bucket_mb " << bucket_mb);
      EXPECT_EQ(reducer.buckets_launched(), 0);
      reducer.Finish();
      ExpectOwnedEqual(reducer, [&](int64_t i) { return SummedGrad(dp, i, 1); });
    }
  }
}

TEST_P(GradientReducerTest, OneRankGroupLeavesGradientsAsTheyAre) {
  const int64_t total = GradientReducer::PaddedSize(1001, 1);
  GradientReducer reducer(FilledGrads(total, World().rank(), 1), Self(), kSmallBucketMb,
                          reduce_scatter());
  reducer.ReadyFrom(total / 2);
  EXPECT_EQ(reducer.buckets_launched(), 0);
  reducer.Finish();
  int64_t owned = 0;
  for (const FlatRange& range : reducer.owned_ranges()) owned += range.size();
  EXPECT_EQ(owned, total);
  ExpectOwnedEqual(reducer, [&](int64_t i) { return Grad(World().rank(), i, 1); });
}

INSTANTIATE_TEST_SUITE_P(Modes, GradientReducerTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "ReduceScatter" : "AllReduce";
                         });

}  // namespace
}  // namespace tetra
