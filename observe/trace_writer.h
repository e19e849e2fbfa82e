// The Chrome/Perfetto timeline of a range of steps (log.trace_path): every
// rank keeps its profiler's spans (core/profiler.h) for the steps of
// log.trace_steps, rank 0 gathers them over the world communicator and writes
// one JSON trace-event file: "X" (complete) events with ts/dur in
// microseconds, pid = world rank (named by its mesh coordinates), tid = one
// track per stream or communication group (compute, tp, dp, pp, ep comm).
// Open it at ui.perfetto.dev or chrome://tracing.
#ifndef TETRA_OBSERVE_TRACE_WRITER_H_
#define TETRA_OBSERVE_TRACE_WRITER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/profiler.h"
#include "parallel/mesh.h"

namespace tetra {

struct StepRange {
  int first = 0, last = 0;  // inclusive
  bool Contains(int step) const { return step >= first && step <= last; }
};

// "5-7" or "5"; empty picks steps 2-4 (after step 1's warm-up: first-touch
// allocations, thread start), cut to the run's `total_steps`. A range outside
// 1..total_steps is a user error.
absl::StatusOr<StepRange> ParseTraceSteps(const std::string& spec, int total_steps);

// The trace-event JSON fragments of one rank's events and its process and
// track names, comma-separated (no brackets); events ordered by track, then
// start, an enclosing span before those it holds.
std::string TraceEventsJson(std::vector<ProfileEvent> events, int rank, const RankCoords& coords);

class TraceWriter {
 public:
  TraceWriter(std::string path, StepRange steps) : path_(std::move(path)), steps_(steps) {}
  bool Records(int step) const { return steps_.Contains(step); }
  // After the step's spans have closed: at the range's last step, gathers
  // every rank's events to rank 0, which writes the file. Collective over
  // `world` at that step.
  absl::Status EndStep(int step, Communicator& world, const RankCoords& coords);

 private:
  std::string path_;
  StepRange steps_;
};

}  // namespace tetra

#endif  // TETRA_OBSERVE_TRACE_WRITER_H_
