// Where a launch's ranks may run, and how that changes: the hosts of an Open
// MPI hostfile, of a Slurm allocation, of a host-discovery script (run again
// before every relaunch and while the job runs, so hosts that come back are
// used again) or this machine alone, less what was lost.
#ifndef TETRA_LAUNCH_CLUSTER_H_
#define TETRA_LAUNCH_CLUSTER_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/host_list.h"
#include "launch/lost_ranks.h"

namespace tetra {

struct ClusterSource {
  int np = 0;                    // ranks asked for: this machine's slots when nothing else is named
  std::string hostfile;          // Open MPI's syntax
  std::string discovery_script;  // prints "HOST[:SLOTS]" lines, the hosts available now
};

class Cluster {
 public:
  // A discovery script, else a hostfile, else the Slurm allocation
  // (SLURM_JOB_NODELIST), else this machine with `np` slots.
  static absl::StatusOr<Cluster> Create(const ClusterSource& source);

  const std::vector<Host>& hosts() const { return hosts_; }
  bool slurm() const { return slurm_; }
  // Slurm nodes lost, for srun --exclude.
  const std::vector<std::string>& excluded() const { return excluded_; }
  // The host rank `rank` of a job of the first slots runs on (mpirun and
  // srun both fill hosts in order).
  std::string HostOfRank(int rank) const;

  // Drops what was lost by a job of `world` ranks: on one machine each lost
  // rank's slot (a GPU gone; the machine, where this runs, stays); on
  // several, each lost rank's host (a node failure is the common cause, and
  // a part of a node rarely helps). A host a discovery script lists is held
  // out until the script has stopped listing it (it went away), so that
  // listed again it has come back.
  void DropLost(const std::vector<LostRank>& lost, int world);

  // With a discovery script: runs it and returns the hosts it lists, less
  // those held out (releasing the held-out hosts it no longer lists);
  // hosts() stays the placement the running job has. Without: hosts().
  absl::StatusOr<std::vector<Host>> Discover();
  // hosts() becomes Discover()'s.
  absl::Status Rediscover();

 private:
  std::vector<Host> hosts_;
  bool slurm_ = false;
  std::vector<std::string> excluded_;
  std::string discovery_script_;
  std::set<std::string> held_out_;
};

}  // namespace tetra

#endif  // TETRA_LAUNCH_CLUSTER_H_
