// The staged backend keeps NCCL's rules: a 2-rank job (break_nccl_rule_main.cc)
// that breaks one must end non-zero with a message naming what each rank
// did, where NCCL would hang or corrupt memory. No bound here is tight: a
// loaded machine only makes the job slower.
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// How long `timeout` lets a job run: the helper's own comm timeout (60 s)
// never fires when the rule is caught.
constexpr int kJobLimitS = 240;

struct JobResult {
  int exit_code = -1;
  std::string output;
};

JobResult BreakRule(const std::string& rule) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  const std::string command = "timeout -k 5 " + std::to_string(kJobLimitS) + " " + TETRA_MPIEXEC +
                              " --oversubscribe -np 2 " + TETRA_BREAK_NCCL_RULE + " " + rule +
                              " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  JobResult result;
  if (pipe == nullptr) return result;
  std::array<char, 4096> chunk;
  while (size_t n = fread(chunk.data(), 1, chunk.size(), pipe))
    result.output.append(chunk.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

void ExpectRefused(const JobResult& job) {
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_NE(job.exit_code, 124) << "the job hung until `timeout` ended it\n" << job.output;
  EXPECT_THAT(job.output, Not(HasSubstr("not refused")));
}

TEST(StagedRulesTest, DifferentCollectivesInOneGroupEndTheJobNamingBoth) {
  const JobResult job = BreakRule("order");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("issues all_reduce (sum) of 8 F32"));
  EXPECT_THAT(job.output, HasSubstr("issues all_gather of 16 F32"));
  EXPECT_THAT(job.output, HasSubstr("same collectives in the same order"));
}

TEST(StagedRulesTest, DifferentSizesOfOneCollectiveEndTheJob) {
  const JobResult job = BreakRule("size");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("all_reduce (sum) of 8 F32"));
  EXPECT_THAT(job.output, HasSubstr("all_reduce (sum) of 9 F32"));
}

TEST(StagedRulesTest, AllToAllCountsThatDisagreeEndTheJob) {
  const JobResult job = BreakRule("counts");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("sends 2 elements to rank 1, which expects 3"));
}

TEST(StagedRulesTest, ATaggedSendEndsTheJob) {
  const JobResult job = BreakRule("tag");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("NCCL has no tags (got 5)"));
}

TEST(StagedRulesTest, ALoneSendToItselfEndsTheJob) {
  const JobResult job = BreakRule("self");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("NCCL refuses a lone send or receive to oneself"));
}

// Lone point-to-point calls run one at a time in posting order with
// rendezvous sends, as on NCCL: both orders below deadlock there, and here
// the watchdog names the call and why.
TEST(StagedRulesTest, LoneSendsPostedFirstByBothRanksDeadlockAsOnNccl) {
  const JobResult job = BreakRule("sends_first");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("send of 8 F32 to rank"));
  EXPECT_THAT(job.output, HasSubstr("run as NCCL runs it"));
}

TEST(StagedRulesTest, LoneReceivesPostedFirstByBothRanksDeadlockAsOnNccl) {
  const JobResult job = BreakRule("receives_first");
  ExpectRefused(job);
  EXPECT_THAT(job.output, HasSubstr("recv of 8 F32 from rank"));
  EXPECT_THAT(job.output, HasSubstr("post such a pair with SendRecvAsync"));
}

}  // namespace
}  // namespace tetra
