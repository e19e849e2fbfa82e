// Runs a launcher (mpirun, srun) as a child process and watches it: its
// standard output passes through, its standard error is echoed line by line
// to ours and handed to a reader (which learns from it what was lost).
// SIGTERM and SIGINT sent to this process are passed on to the child, whose
// ranks then save and stop; the caller is told so as not to restart them.
// Once the reader has seen the job fail, the launcher gets `grace_s` to end
// it: mpirun waits forever for the daemon of a host it can no longer reach,
// so after that it is ended (SIGTERM, then SIGKILL).
#ifndef TETRA_LAUNCH_CHILD_PROCESS_H_
#define TETRA_LAUNCH_CHILD_PROCESS_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tetra {

struct ChildExit {
  int exit_code = 0;     // when it exited
  int signal = 0;        // when a signal ended it
  bool stopped = false;  // this process was asked to stop (SIGTERM/SIGINT) while it ran
  bool ended = false;    // it outlived its grace after the job failed and was ended
  bool ok() const { return exit_code == 0 && signal == 0; }
};

// Starts argv[0] (searched on PATH) with `argv` and `environment`
// ("NAME=value") added to ours, and waits for it. `on_error_line` returns
// true for a line that says the job failed.
absl::StatusOr<ChildExit> RunWatched(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& environment,
                                     const std::function<bool(std::string_view)>& on_error_line,
                                     double grace_s);

}  // namespace tetra

#endif  // TETRA_LAUNCH_CHILD_PROCESS_H_
