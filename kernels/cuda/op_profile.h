// Where a GPU step's time goes, per op of the op API: with the environment
// variable TETRA_OP_PROFILE set, every device op waits for the device before
// and after it and adds the wall time to its op's total; the totals print to
// stderr at exit (op, calls, seconds, share). Off, an OpTimer costs one
// branch. Profiling serialises the host with the device, so it measures ops,
// not the overlapped step.
#ifndef TETRA_KERNELS_CUDA_OP_PROFILE_H_
#define TETRA_KERNELS_CUDA_OP_PROFILE_H_

#include <chrono>

namespace tetra::cuda {

class OpTimer {
 public:
  // `op`: a string literal naming the op (kept by pointer).
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;  // null when profiling is off
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_OP_PROFILE_H_
