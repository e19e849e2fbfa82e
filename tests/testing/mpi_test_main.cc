// GoogleTest main for multi-rank tests (tests/**/<name>_mpi_test.cc, run under
// mpirun): every rank runs every test, then the failure count is summed over
// ranks so a failure on any rank fails every rank (docs/architecture.md, "Tests"). Rank 0
// prints gtest's usual output; the other ranks print only their failures.
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"

namespace {

// Prints each failed assertion and failed test, tagged with the world rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tetra::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (session.world_rank() != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(session.world_rank()));
  }
  const int local_status = RUN_ALL_TESTS();
  int failed = testing::UnitTest::GetInstance()->failed_test_count();
  if (local_status != 0 && failed == 0) failed = 1;  // e.g. a global set-up failure
  int failed_anywhere = 0;
  MPI_Allreduce(&failed, &failed_anywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (session.world_rank() == 0 && failed_anywhere > 0) {
    std::fprintf(stderr, "%d failed test(s) summed over %d ranks\n", failed_anywhere,
                 session.world_size());
  }
  return failed_anywhere > 0 ? 1 : 0;
}
