// CommHandle on its own (no MPI): completion, move semantics, and the
// watchdog's timeout path, which must print what was waited for and end the
// process through the abort handler.
#include <unistd.h>

#include <string>
#include <utility>

#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

// Watchdog deadline for the timeout cases: short, so the tests stay fast.
constexpr double kShortTimeoutS = 0.05;
// Deadline for handles that complete: never reached.
constexpr double kLongTimeoutS = 60;

std::string Describe() { return "all_reduce (sum) of 1024 F32 on group dp (world ranks 1, 3)"; }

// A handle whose poll reports completion on its `polls_needed`-th call.
CommHandle CompletesAfter(int polls_needed, int* polls) {
  return CommHandle([=] { return ++*polls >= polls_needed; }, Describe, kLongTimeoutS);
}

TEST(CommHandleTest, DefaultHandleIsComplete) {
  CommHandle handle;
  EXPECT_TRUE(handle.Test());
  handle.Wait();
}

TEST(CommHandleTest, WaitPollsUntilDoneThenNeverAgain) {
  int polls = 0;
  CommHandle handle = CompletesAfter(3, &polls);
  EXPECT_FALSE(handle.Test());
  handle.Wait();
  EXPECT_EQ(polls, 3);
  handle.Wait();
  EXPECT_TRUE(handle.Test());
  EXPECT_EQ(polls, 3);
}

TEST(CommHandleTest, DestructorWaitsOnPendingHandle) {
  int polls = 0;
  { CommHandle handle = CompletesAfter(5, &polls); }
  EXPECT_EQ(polls, 5);
}

TEST(CommHandleTest, MovedFromHandleIsComplete) {
  int polls = 0;
  CommHandle first = CompletesAfter(2, &polls);
  CommHandle second = std::move(first);
  EXPECT_TRUE(first.Test());  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(polls, 0);
  second.Wait();
  EXPECT_EQ(polls, 2);
}

TEST(CommHandleTest, AssigningOverPendingHandleWaitsOnItFirst) {
  int first_polls = 0, second_polls = 0;
  CommHandle handle = CompletesAfter(4, &first_polls);
  handle = CompletesAfter(2, &second_polls);
  EXPECT_EQ(first_polls, 4);
  EXPECT_EQ(second_polls, 0);
  handle.Wait();
  EXPECT_EQ(second_polls, 2);
}

TEST(CommHandleTest, ReduceOpNames) {
  EXPECT_STREQ(ReduceOpName(ReduceOp::kSum), "sum");
  EXPECT_STREQ(ReduceOpName(ReduceOp::kMax), "max");
  EXPECT_STREQ(ReduceOpName(ReduceOp::kMean), "mean");
}

using CommHandleDeathTest = testing::Test;

TEST_F(CommHandleDeathTest, TimeoutNamesTheOperationAndExits) {
  EXPECT_EXIT(
      {
        CommHandle handle([] { return false; }, Describe, kShortTimeoutS);
        handle.Wait();
      },
      testing::ExitedWithCode(1),
      "waited [0-9]+\\.[0-9] s for all_reduce \\(sum\\) of 1024 F32 on group dp \\(world ranks 1, "
      "3\\) "
      "without completing.*\nhint: .*parallel\\.comm_timeout_s");
}

TEST_F(CommHandleDeathTest, TimeoutRunsOnTimeoutThenTheAbortHandler) {
  EXPECT_EXIT(
      {
        SetCommAbortHandler([] {
          fputs("abort handler ran\n", stderr);
          _exit(7);
        });
        CommHandle handle([] { return false; }, Describe, kShortTimeoutS,
                          [] { fputs("on_timeout ran\n", stderr); });
        handle.Wait();
      },
      testing::ExitedWithCode(7), "on_timeout ran\nabort handler ran");
}

}  // namespace
}  // namespace tetra
