// Where the emulated device is when something fails: each host thread (a
// stream worker, the caller of a runtime function) names what it is running
// now, so Fail's message says which kernel, block and thread, or which call.
#ifndef TETRA_EMULATOR_FAILURE_H_
#define TETRA_EMULATOR_FAILURE_H_

#include <string>

namespace tetra::emulator {

// Names what this host thread runs until the scope ends (scopes nest).
class RunningScope {
 public:
  explicit RunningScope(std::string what);
  ~RunningScope();
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  std::string previous_;
};

// What this host thread runs now ("" when nothing was named).
const std::string& Running();

// Prints "tetra emulated GPU: <why>" and goes on: why a call was refused
// with an error code (a real library only returns the code).
void Explain(const std::string& why);

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_FAILURE_H_
