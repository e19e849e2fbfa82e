#include "launch/lost_ranks.h"

#include <gtest/gtest.h>

namespace tetra {
namespace {

std::vector<LostRank> Parse(const std::vector<std::string>& lines) {
  LostRankParser parser;
  for (const std::string& line : lines) parser.Line(line);
  return parser.lost();
}

// Open MPI 4.1's own words (run here: a rank killed with SIGKILL).
TEST(LostRanksTest, MpirunNamesARankKilledByASignal) {
  const auto lost = Parse(
      {"Primary job  terminated normally, but 1 process returned",
       "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, 1);
  EXPECT_EQ(lost[0].host, "vm");
  EXPECT_EQ(lost[0].how, "signal 9 (Killed)");
  EXPECT_EQ(DescribeLost(lost), "rank 1 on host vm (signal 9 (Killed))");
}

TEST(LostRanksTest, MpirunNamesAHostWhoseDaemonItLost) {
  const auto lost = Parse({"ORTE has lost communication with a remote daemon.", "",
                           "  HNP daemon   : [[51234,0],0] on node head",
                           "  Remote daemon: [[51234,0],1] on node 10.77.0.2", ""});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, -1);
  EXPECT_EQ(lost[0].host, "10.77.0.2");
}

// Open MPI's TCP transport when host b's processes were killed (seen here).
TEST(LostRanksTest, ARankNamesTheHostOfAPeerThatDisconnected) {
  const auto lost = Parse({"An MPI communication peer process has unexpectedly disconnected.  This",
                           "usually indicates a failure in the peer process (e.g., a crash or", "",
                           "  Local host: ha", "  Local PID:  18869", "  Peer host:  10.77.0.2"});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, -1);
  EXPECT_EQ(lost[0].host, "10.77.0.2");
}

TEST(LostRanksTest, SrunNamesKilledTasksAndFailedNodesButNotRanksThatExited) {
  const auto lost = Parse({"srun: error: node02: tasks 2-3: Killed",
                           "srun: error: node01: task 0: Exited with exit code 1",
                           "srun: error: Node failure on node05"});
  ASSERT_EQ(lost.size(), 3u);
  EXPECT_EQ(lost[0].rank, 2);
  EXPECT_EQ(lost[1].rank, 3);
  EXPECT_EQ(lost[1].host, "node02");
  EXPECT_EQ(lost[2].rank, -1);
  EXPECT_EQ(lost[2].host, "node05");
}

// Every rank that timed out names them; each is lost once.
TEST(LostRanksTest, ATimedOutRankNamesThoseThatDidNotAnswerItsProbe) {
  const auto lost = Parse(
      {"tetra: error: rank 0 (world) waited 10.0 s for all_reduce (sum) of 1 F32 on group world "
       "(world ranks 0-3) without completing; rank 1 on host ha; ranks 2, 3 on host hb did not "
       "answer a liveness probe within 2 s: lost, or stuck outside communication",
       "tetra: error: rank 1 (world) waited 10.0 s ...; ranks 2, 3 on host hb did not answer a "
       "liveness probe within 2 s: lost, or stuck outside communication"});
  ASSERT_EQ(lost.size(), 3u);
  EXPECT_EQ(lost[0].rank, 1);
  EXPECT_EQ(lost[0].host, "ha");
  EXPECT_EQ(lost[1].rank, 2);
  EXPECT_EQ(lost[2].rank, 3);
  EXPECT_EQ(lost[2].host, "hb");
}

TEST(LostRanksTest, OrdinaryOutputNamesNothing) {
  EXPECT_TRUE(Parse({"tetra: error: rank 0 (world) waited 10.0 s for all_reduce",
                     "Remote daemon: [[1,0],1] on node b", "step 3/10 | loss 4.1"})
                  .empty());
}

}  // namespace
}  // namespace tetra
