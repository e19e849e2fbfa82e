// Runs a launcher (mpirun, srun) as a child process and watches it: its
// standard output passes through, its standard error is echoed line by line
// to ours and handed to a reader (which learns from it what was lost).
// SIGTERM and SIGINT sent to this process are passed on to the child, whose
// ranks then save and stop; the caller is told so as not to restart them.
// Once the reader has seen the job fail, the launcher gets a grace period
// to end it: mpirun waits forever for the daemon of a host it can no longer
// reach, so after that it is ended (SIGTERM, then SIGKILL).
#ifndef TETRA_LAUNCH_CHILD_PROCESS_H_
#define TETRA_LAUNCH_CHILD_PROCESS_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tetra {

// How the child is watched.
struct WatchRules {
  // True for a line of its standard error that says the job failed; the
  // launcher then has `grace_s` to end.
  std::function<bool(std::string_view)> failed_line;
  double grace_s = 600;
  // Asked every `check_interval_s` while the job runs (none when unset):
  // true asks the job to stop (SIGTERM: its ranks save and exit), as when
  // hosts came back and a larger job can go on.
  std::function<bool()> stop_to_grow;
  double check_interval_s = 30;
};

struct ChildExit {
  int exit_code = 0;     // when it exited
  int signal = 0;        // when a signal ended it
  bool stopped = false;  // this process was asked to stop (SIGTERM/SIGINT) while it ran
  bool ended = false;    // it outlived its grace after the job failed and was ended
  bool to_grow = false;  // stop_to_grow asked it to stop
  bool ok() const { return exit_code == 0 && signal == 0; }
};

// Starts argv[0] (searched on PATH) with `argv` and `environment`
// ("NAME=value") added to ours, and waits for it.
absl::StatusOr<ChildExit> RunWatched(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& environment,
                                     const WatchRules& rules);

}  // namespace tetra

#endif  // TETRA_LAUNCH_CHILD_PROCESS_H_
