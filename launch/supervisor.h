// tetra launch's supervisor: starts a training job with the launcher at
// hand (srun inside a Slurm allocation, else mpirun), and when it fails for
// a reason a restart can fix (a rank or host lost), drops what was lost,
// re-plans the layout for the ranks left (elastic_plan.h) and starts it
// again, resuming from the newest complete checkpoint (which any layout
// reads), until the run finishes, fewer than --min-np ranks remain or
// --max-restarts is spent. Each restart is a line on the log and, with
// log.metrics_path, an event line in the metrics. The ranks of attempt K
// record errors under checkpoint.dir/launch/attempt-K (rank_errors.h).
#ifndef TETRA_LAUNCH_SUPERVISOR_H_
#define TETRA_LAUNCH_SUPERVISOR_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tetra {

struct LaunchOptions {
  int np = 0;      // ranks to start with
  int min_np = 0;  // fewest ranks worth going on with
  int max_restarts = 3;
  std::string hostfile;  // Open MPI's syntax; empty: this machine, or the Slurm allocation
  std::string config_path;
  std::vector<std::string> overrides;  // the train command's --set values
  std::string tetra_binary;            // what each rank runs
};

// Runs the job through its restarts; OK once training finished.
absl::Status Supervise(const LaunchOptions& options, std::ostream& log);

}  // namespace tetra

#endif  // TETRA_LAUNCH_SUPERVISOR_H_
