#include "core/profiler.h"

#include <utility>

namespace tetra {

const char* SpanKindName(SpanKind kind) {
  switch (kind) {
    case SpanKind::kStep:
      return "step";
    case SpanKind::kForward:
      return "forward";
    case SpanKind::kBackward:
      return "backward";
    case SpanKind::kOptimizer:
      return "optimizer";
    case SpanKind::kCommTp:
      return "comm tp";
    case SpanKind::kCommDp:
      return "comm dp";
    case SpanKind::kCommPp:
      return "comm pp";
    case SpanKind::kCommEp:
      return "comm ep";
  }
  return "?";
}

int SpanTrack(SpanKind kind) {
  switch (kind) {
    case SpanKind::kCommTp:
      return 1;
    case SpanKind::kCommDp:
      return 2;
    case SpanKind::kCommPp:
      return 3;
    case SpanKind::kCommEp:
      return 4;
    default:
      return 0;
  }
}

const char* TrackName(int track) {
  static constexpr const char* kNames[kNumTracks] = {"compute", "tp comm", "dp comm", "pp comm",
                                                     "ep comm"};
  return track >= 0 && track < kNumTracks ? kNames[track] : "?";
}

Profiler& Profiler::Get() {
  static Profiler profiler;
  return profiler;
}

void Profiler::BeginStep(bool record) {
  totals_.fill(0);
  recording_ = record;
}

void Profiler::ResetOrigin() { origin_ = std::chrono::steady_clock::now(); }

std::vector<ProfileEvent> Profiler::TakeEvents() { return std::exchange(events_, {}); }

void Profiler::Add(SpanKind kind, const char* name, std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point end, int64_t arg) {
  const std::chrono::duration<double> seconds = end - start;
  totals_[static_cast<int>(kind)] += seconds.count();
  if (!recording_) return;
  const std::chrono::duration<double, std::micro> since_origin = start - origin_;
  events_.push_back({kind, name != nullptr ? name : SpanKindName(kind), since_origin.count(),
                     seconds.count() * 1e6, arg});
}

}  // namespace tetra
