// Which ranks are still there, asked when a wait times out: on a duplicate
// of MPI_COMM_WORLD each rank that times out sends every other rank a probe,
// and ranks answer probes while they sleep in a wait (every live rank of a
// stuck job is in one). A rank that does not answer within the window is
// named with its host: its process or host was lost, or it is stuck outside
// communication. MpiSession installs it through SetWaitHooks.
#ifndef TETRA_COMM_MPI_LIVENESS_H_
#define TETRA_COMM_MPI_LIVENESS_H_

#include <mpi.h>

#include <string>
#include <vector>

namespace tetra {

class MpiLiveness {
 public:
  // Collective over MPI_COMM_WORLD: duplicates it and gathers the host names.
  MpiLiveness();
  ~MpiLiveness();
  MpiLiveness(const MpiLiveness&) = delete;
  MpiLiveness& operator=(const MpiLiveness&) = delete;

  // Answers the probes that have arrived.
  void AnswerProbes();
  // Probes every other rank and waits up to `window_s` for the answers,
  // answering probes meanwhile: "ranks 2, 3 on host b did not answer a
  // liveness probe within 2 s", or "" when all answered.
  std::string MissingRanks(double window_s);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::vector<std::string> hosts_;  // by world rank
};

}  // namespace tetra

#endif  // TETRA_COMM_MPI_LIVENESS_H_
