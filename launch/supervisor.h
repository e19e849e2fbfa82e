// tetra launch's supervisor: starts a training job with the launcher at
// hand (srun inside a Slurm allocation, else mpirun), and when it fails for
// a reason a restart can fix (a rank or host lost), drops what was lost,
// re-plans the layout for the ranks left (elastic_plan.h) and starts it
// again, resuming from the newest complete checkpoint (which any layout
// reads), until the run finishes, fewer than --min-np ranks remain or
// --max-restarts is spent (restarts to grow onto hosts that came back do not
// count). Each restart is a line on the log and, with
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
  // Prints the hosts available now, "HOST[:SLOTS]" per line (Horovod's
  // convention): run before each launch and every discovery_interval_s
  // while the job runs (TETRA_LAUNCH_RESTARTS in its environment: the
  // restarts so far); when hosts that came back allow a larger job, the job
  // is stopped (it saves) and relaunched on them.
  std::string host_discovery_script;
  double discovery_interval_s = 30;
  std::string config_path;
  std::vector<std::string> overrides;  // the train command's --set values
  std::string tetra_binary;            // what each rank runs
};

// Runs the job through its restarts; OK once training finished.
absl::Status Supervise(const LaunchOptions& options, std::ostream& log);

}  // namespace tetra

#endif  // TETRA_LAUNCH_SUPERVISOR_H_
