// Where the time goes, per op of the op API, on either backend: with the
// environment variable TETRA_OP_PROFILE set (or after EnableOpProfile), every
// op adds its wall time to its op's total, a device op waiting for the device
// before and after it; the totals print to stderr at exit (op, calls,
// seconds, share, and by kind of work). Off, an OpTimer costs one branch.
// Profiling serialises the host with the device, so it measures ops, not the
// overlapped step; its call counts are the launches the ops made.
#ifndef TETRA_KERNELS_OP_PROFILE_H_
#define TETRA_KERNELS_OP_PROFILE_H_

#include <chrono>
#include <cstdint>

#include "core/tensor.h"

namespace tetra::ops {

class OpTimer {
 public:
  // `op`: a string literal naming the op (kept by pointer); `device`: where it runs.
  OpTimer(const char* op, DeviceType device);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;  // null when profiling is off
  DeviceType device_;
  std::chrono::steady_clock::time_point start_;
};

// Profiles from now on, as TETRA_OP_PROFILE does from the start.
void EnableOpProfile();
// Calls of `op` (an op API function name, kernels/op_list.h) profiled so far.
int64_t OpProfileCalls(const char* op);

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OP_PROFILE_H_
