// The machines a launch may use and how many ranks each takes: from an Open
// MPI hostfile, from a Slurm allocation (SLURM_JOB_NODELIST), or this machine
// alone. tetra launch shrinks the list as hosts fail.
#ifndef TETRA_LAUNCH_HOST_LIST_H_
#define TETRA_LAUNCH_HOST_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tetra {

struct Host {
  std::string name;
  int slots = 1;  // ranks it takes
};

// Open MPI's hostfile syntax: a host per line ("node1 slots=4"; no slots is
// one), '#' comments, blank lines.
absl::StatusOr<std::vector<Host>> ParseHostfile(absl::string_view text, const std::string& source);

// A host-discovery script's output (Horovod's convention): a host per line,
// "node1:4" or "node1" (one slot), blank lines ignored; no host is an
// empty list, not an error (every host may be away for a while).
absl::StatusOr<std::vector<Host>> ParseDiscoveredHosts(absl::string_view text,
                                                       const std::string& source);

// Slurm's compressed node list: "gpu[01-03,07],login2" is gpu01, gpu02,
// gpu03, gpu07 and login2, with the ranges' zero padding kept.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(absl::string_view list);

int TotalSlots(const std::vector<Host>& hosts);

// "a:2,b:2": mpirun's --host, the first `ranks` slots in order.
std::string MpirunHostArgument(const std::vector<Host>& hosts, int ranks);

}  // namespace tetra

#endif  // TETRA_LAUNCH_HOST_LIST_H_
