// The step profiler: named spans of one rank's work (forward, backward,
// optimizer, and the time blocked on each communication group), totalled per
// kind for the metrics' time breakdown and, while recording, kept as events
// for the Chrome/Perfetto trace (observe/trace_writer.h).
//
// One process-wide profiler, used from the thread that runs the step (the
// communicators' thread). A span costs two clock reads and an add; events are
// kept only while recording, so untraced steps allocate nothing.
#ifndef TETRA_CORE_PROFILER_H_
#define TETRA_CORE_PROFILER_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace tetra {

// What a span measures. Comm kinds are time blocked on that group's
// communication (exposed, not overlapped), each on its own trace track.
enum class SpanKind { kStep, kForward, kBackward, kOptimizer, kCommTp, kCommDp, kCommPp, kCommEp };
inline constexpr int kNumSpanKinds = 8;

const char* SpanKindName(SpanKind kind);  // "forward", "comm tp", ...
// The trace track (Chrome "tid") of a kind: 0 compute, 1 tp, 2 dp, 3 pp, 4 ep.
int SpanTrack(SpanKind kind);
const char* TrackName(int track);  // "compute", "tp comm", ...
inline constexpr int kNumTracks = 5;

struct ProfileEvent {
  SpanKind kind;
  const char* name;  // a static string
  double start_us;   // since the profiler's origin
  double duration_us;
  int64_t arg;  // micro-batch or step index; -1 when none
};

class Profiler {
 public:
  static Profiler& Get();

  // Zeroes the totals for a new step; `record` keeps this step's events.
  void BeginStep(bool record);
  // Time zero of the events (call after a barrier, so ranks' clocks line up).
  void ResetOrigin();
  double TotalSeconds(SpanKind kind) const { return totals_[static_cast<int>(kind)]; }
  // The recorded events, oldest first; the profiler forgets them.
  std::vector<ProfileEvent> TakeEvents();

  void Add(SpanKind kind, const char* name, std::chrono::steady_clock::time_point start,
           std::chrono::steady_clock::time_point end, int64_t arg);

 private:
  std::array<double, kNumSpanKinds> totals_{};
  bool recording_ = false;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<ProfileEvent> events_;
};

// Adds the time from construction to destruction to the profiler.
class ScopedSpan {
 public:
  explicit ScopedSpan(SpanKind kind, const char* name = nullptr, int64_t arg = -1)
      : kind_(kind), name_(name), arg_(arg), start_(std::chrono::steady_clock::now()) {}
  ~ScopedSpan() {
    Profiler::Get().Add(kind_, name_, start_, std::chrono::steady_clock::now(), arg_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  SpanKind kind_;
  const char* name_;
  int64_t arg_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tetra

#endif  // TETRA_CORE_PROFILER_H_
