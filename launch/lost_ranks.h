// What a launcher's own messages say was lost when a job failed: mpirun
// names a rank that died by a signal, a host whose daemon it lost and a host
// whose process disconnected from a rank's (Open MPI's TCP transport); srun
// names a node's tasks that were killed and a node that failed; a rank whose
// wait timed out names the ranks that did not answer its liveness probe
// (comm/mpi_liveness.h), as when a host's network was cut. A rank that
// ended by itself (an error it reported, a communication timeout it noticed)
// is not lost: its host is still there.
#ifndef TETRA_LAUNCH_LOST_RANKS_H_
#define TETRA_LAUNCH_LOST_RANKS_H_

#include <string>
#include <string_view>
#include <vector>

namespace tetra {

struct LostRank {
  std::string host;
  int rank = -1;    // -1: the whole host (its daemon or node was lost)
  std::string how;  // "signal 9 (Killed)", "daemon lost", ...
};

// Reads the launcher's output a line at a time.
class LostRankParser {
 public:
  // True when the line says the job failed: a rank's error, or the
  // launcher's report of a rank or host lost or of the job aborted.
  bool Line(std::string_view line);
  const std::vector<LostRank>& lost() const { return lost_; }

 private:
  void Add(LostRank lost);  // once per host and rank
  bool OpenMpiLine(std::string_view line);
  bool ProbeLine(std::string_view line);
  bool SrunLine(std::string_view line);

  // Open MPI's multi-line reports, which name the host a few lines later.
  enum class Block { kNone, kDaemonLost, kPeerDisconnected };

  std::vector<LostRank> lost_;
  Block open_block_ = Block::kNone;
};

// "rank 1 on host a (signal 9 (Killed)); host b (daemon lost)"
std::string DescribeLost(const std::vector<LostRank>& lost);

}  // namespace tetra

#endif  // TETRA_LAUNCH_LOST_RANKS_H_
