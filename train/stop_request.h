// SIGTERM and SIGINT as a request to stop cleanly: the trainer finishes the
// step it is in, saves a checkpoint and exits 0, instead of dying mid-step
// and losing the work since the last checkpoint. The ranks agree (a max
// all-reduce of the flag after every step), so all save the same step even
// when the signal reaches them at different moments.
#ifndef TETRA_TRAIN_STOP_REQUEST_H_
#define TETRA_TRAIN_STOP_REQUEST_H_

#include <csignal>

#include "comm/communicator.h"

namespace tetra {

class StopRequest {
 public:
  // Catches SIGTERM and SIGINT until destroyed (the previous handlers return then).
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // Whether any rank of `world` has been signalled. Collective over `world`.
  bool Agreed(Communicator& world) const;
  // The signal this rank received ("SIGTERM"), or "a signal on another rank".
  const char* SignalName() const;

 private:
  struct sigaction previous_term_, previous_int_;
};

}  // namespace tetra

#endif  // TETRA_TRAIN_STOP_REQUEST_H_
