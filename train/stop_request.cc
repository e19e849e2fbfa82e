#include "train/stop_request.h"

namespace tetra {
namespace {

volatile std::sig_atomic_t received_signal = 0;

void OnSignal(int signal) { received_signal = signal; }

}  // namespace

StopRequest::StopRequest() {
  received_signal = 0;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
}

StopRequest::~StopRequest() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

bool StopRequest::Agreed(Communicator& world) const {
  return MaxOverRanks(world, received_signal != 0 ? 1.0 : 0.0) > 0;
}

const char* StopRequest::SignalName() const {
  switch (received_signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal on another rank";
  }
}

}  // namespace tetra
