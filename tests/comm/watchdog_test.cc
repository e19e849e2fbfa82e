// The watchdog end to end: a 2-rank MPI job (skip_collective_main.cc) in
// which rank 1 never joins an all-reduce (it waits forever) must end,
// non-zero, through the watchdog, with a message naming the operation, the
// group, the waiting rank and the rank that did not answer its liveness
// probe (with its host), and a wait of at least the 2 s comm timeout, and
// must leave no process behind. No bound here is tight: a loaded machine only
// makes the job slower, never ends it otherwise.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "core/timer.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

// The helper's comm timeout; the watchdog must not fire before it.
constexpr double kCommTimeoutS = 2;
// How long `timeout` lets the job run before ending it (then the watchdog
// failed): mpirun start-up, the 2 s and MPI_Abort's teardown take a few
// seconds on 2 idle cores.
constexpr int kJobLimitS = 300;
// How long the aborted ranks may take to disappear after mpirun returns
// (they are gone at once when the abort works).
constexpr double kMaxExitSeconds = 60;

// True while `pid` exists and is not a zombie.
bool IsRunning(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t name_end = text.rfind(')');
  return name_end != std::string::npos && name_end + 2 < text.size() && text[name_end + 2] != 'Z';
}

TEST(WatchdogTest, StuckRankEndsTheJobNamingTheOperation) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  const std::string& dir = testing::ScratchDir("watchdog_test");
  // `timeout` ends the job if the watchdog itself fails to.
  const std::string command = "timeout -k 5 " + std::to_string(kJobLimitS) + " " + TETRA_MPIEXEC +
                              " --oversubscribe -np 2 " + TETRA_SKIP_COLLECTIVE + " " + dir +
                              " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> chunk;
  while (size_t n = fread(chunk.data(), 1, chunk.size(), pipe)) output.append(chunk.data(), n);
  const int status = pclose(pipe);

  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_NE(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(WEXITSTATUS(status), 124) << "the watchdog did not end the job; `timeout` did\n"
                                      << output;
  const std::string waited = "tetra: error: rank 0 (world) waited ";
  const size_t at = output.find(waited);
  ASSERT_NE(at, std::string::npos) << output;
  EXPECT_GE(std::stod(output.substr(at + waited.size())), kCommTimeoutS) << output;
  EXPECT_NE(output.find("for all_reduce (sum) of 1024 F32 on group skippers (world ranks 0, 1)"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("parallel.comm_timeout_s"), std::string::npos) << output;
  // Rank 1 sleeps outside any wait, so it does not answer rank 0's liveness probe.
  EXPECT_NE(output.find("rank 1 on host "), std::string::npos) << output;
  EXPECT_NE(output.find("did not answer a liveness probe"), std::string::npos) << output;

  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream pid_file(dir + "/rank" + std::to_string(rank) + ".pid");
    std::string pid;
    ASSERT_TRUE(std::getline(pid_file, pid)) << "rank " << rank << " wrote no pid\n" << output;
    Timer exit_timer;
    while (IsRunning(pid) && exit_timer.Seconds() < kMaxExitSeconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (IsRunning(pid)) {
      ADD_FAILURE() << "rank " << rank << " (pid " << pid << ") still runs; killing it";
      kill(std::stoi(pid), SIGKILL);
    }
  }
}

}  // namespace
}  // namespace tetra
