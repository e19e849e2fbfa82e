// The breakdown over ranks: each time is the mean over ranks, the peak memory
// the largest, and per-group fields appear only for groups of several ranks;
// the slowest rank is the one whose compute, without its tensor- and
// expert-parallel waits, is the longest.
#include <memory>

#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"
#include "observe/step_timing.h"

namespace tetra {
namespace {

TEST(StepTimingMpiTest, MeanTimesAndLargestMemoryOverRanks) {
  const std::unique_ptr<Communicator> world = MpiWorld(60);
  const int n = world->size(), r = world->rank();
  // Rank r reports r + 1 seconds (and 2(r + 1), ...): the mean over n ranks is
  // (n + 1) / 2, exact in binary for n up to 8 (halves).
  StepTiming local;
  local.fwd_s = r + 1;
  local.bwd_s = 2 * (r + 1);
  local.comm_dp_s = 0.5 * (r + 1);
  local.comm_pp_s = 0.25 * (r + 1);
  local.peak_memory_bytes = 1000 * (r == 1 ? 7 : 3);
  StepMetrics m;
  AddStepTiming(*world, MeshShape::Of(/*tp=*/1, /*pp=*/2, /*dp=*/n / 2), local, m);
  const double mean = (n + 1) / 2.0;
  EXPECT_EQ(*m.fwd_s, mean);
  EXPECT_EQ(*m.bwd_s, 2 * mean);
  EXPECT_EQ(*m.comm_exposed_s_dp, 0.5 * mean);
  EXPECT_EQ(*m.comm_exposed_s_pp, 0.25 * mean);
  EXPECT_EQ(*m.comm_exposed_s, 0.75 * mean);
  EXPECT_FALSE(m.comm_exposed_s_tp.has_value());
  EXPECT_EQ(*m.peak_memory_bytes, 7000);
}

TEST(StepTimingMpiTest, SlowestRankByComputeWithoutItsWaits) {
  const std::unique_ptr<Communicator> world = MpiWorld(60);
  const int n = world->size(), r = world->rank();
  const int slow = n / 2;
  // Every rank computes 1 s (fwd 0.5, bwd 0.25, optimizer 0.25) but rank
  // `slow` computes 4 s; rank 0 also waits 8 s on tensor- and expert-parallel
  // peers inside its forward, which is no compute of its own; data and
  // pipeline waits lie outside the compute spans anyway.
  StepTiming local;
  local.fwd_s = r == slow ? 3.5 : 0.5;
  local.bwd_s = 0.25;
  local.optimizer_s = 0.25;
  local.comm_dp_s = 16;
  local.comm_pp_s = 16;
  if (r == 0) {
    local.fwd_s += 8;
    local.comm_tp_s = 4;
    local.comm_ep_s = 4;
  }
  StepMetrics m;
  AddStepTiming(*world, MeshShape::Of(/*tp=*/1, /*pp=*/1, /*dp=*/n), local, m);
  ASSERT_TRUE(m.slowest_rank.has_value());
  EXPECT_EQ(*m.slowest_rank, slow);
  // The median of n - 1 ones and a 4: 1, or (1 + 4) / 2 for two ranks.
  EXPECT_EQ(*m.straggler_ratio, n == 2 ? 4 / 2.5 : 4);
}

}  // namespace
}  // namespace tetra
