// Where a step's time went: forward, backward and optimizer compute, and the
// time blocked on each communication group (tensor, data, pipeline, expert
// parallel), read from the step profiler (core/profiler.h), with the
// process's peak memory. The metrics report each time as the mean over ranks
// and the memory as the largest.
//
// The forward and backward times include the tensor-parallel collectives they
// block on (comm_exposed_s_tp is a part of them); the data-parallel waits
// (gradient reduction after the backward, ZeRO-1's parameter all-gather in the
// optimizer) and the pipeline waits lie outside fwd_s and bwd_s, the ZeRO-1
// gather inside optimizer_s.
#ifndef TETRA_OBSERVE_STEP_TIMING_H_
#define TETRA_OBSERVE_STEP_TIMING_H_

#include <optional>

#include "comm/communicator.h"
#include "observe/metrics_log.h"

namespace tetra {

struct StepTiming {
  double fwd_s = 0, bwd_s = 0, optimizer_s = 0;
  double comm_tp_s = 0, comm_dp_s = 0, comm_pp_s = 0, comm_ep_s = 0;
  double peak_memory_bytes = 0;  // the process's peak resident set (CPU)
  // Device runs: the device-memory calls of the step that waited for the
  // device (SynchronizingDeviceAllocations, core/tensor.h); none should.
  std::optional<double> device_mallocs;
  // Device runs: the step's launches, host waits and device allocations
  // (core/device_work.h).
  std::optional<double> device_launches, host_waits, device_allocations;

  // This rank's breakdown of the step the profiler has measured since its
  // last BeginStep.
  static StepTiming FromProfiler();

  // The rank's own work: forward, backward and optimizer without the
  // tensor- and expert-parallel waits inside them, where a fast rank waits
  // for a slow peer. ZeRO-1's parameter gather, inside optimizer_s, stays in
  // (the profiler counts it with the gradient reduction): there the others
  // wait out the slow rank's update, which lowers its ratio but leaves it
  // the slowest.
  double ComputeSeconds() const { return fwd_s + bwd_s + optimizer_s - comm_tp_s - comm_ep_s; }
};

// Peak resident memory of this process in bytes (getrusage).
double PeakResidentBytes();

// Fills m's breakdown with the mean over `world`'s ranks of each rank's
// `local` times and the largest peak memory and device counts; the layout decides which
// per-group fields a step reports. With several ranks, also the slowest rank
// by ComputeSeconds and its ratio to the median (from the same gather).
// Collective over `world`.
void AddStepTiming(Communicator& world, const MeshShape& layout, const StepTiming& local,
                   StepMetrics& m);

}  // namespace tetra

#endif  // TETRA_OBSERVE_STEP_TIMING_H_
