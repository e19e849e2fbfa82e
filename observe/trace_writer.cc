#include "observe/trace_writer.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/atomic_file.h"
#include "core/user_error.h"

namespace tetra {
namespace {

constexpr int kDefaultFirst = 2, kDefaultLast = 4;
constexpr int kLengthTag = 1, kEventsTag = 2;

std::string Metadata(const char* what, int pid, int tid, const std::string& name) {
  return absl::StrFormat(
      R"({"name": "%s", "ph": "M", "pid": %d, "tid": %d, "args": {"name": "%s"}})", what, pid, tid,
      name);
}

}  // namespace

absl::StatusOr<StepRange> ParseTraceSteps(const std::string& spec, int total_steps) {
  if (spec.empty())
    return StepRange{std::min(kDefaultFirst, total_steps), std::min(kDefaultLast, total_steps)};
  const std::vector<std::string> parts = absl::StrSplit(spec, '-');
  StepRange range;
  const bool parsed = parts.size() <= 2 && absl::SimpleAtoi(parts[0], &range.first) &&
                      absl::SimpleAtoi(parts.back(), &range.last);
  if (!parsed || range.first < 1 || range.last < range.first || range.last > total_steps) {
    return UserError(
        absl::StrCat("log.trace_steps \"", spec, "\" is not a range of steps within 1-",
                     total_steps, " (train.steps)"),
        "write \"FIRST-LAST\" or \"STEP\", e.g. \"5-7\"; leave it empty for steps 2-4");
  }
  return range;
}

std::string TraceEventsJson(std::vector<ProfileEvent> events, int rank, const RankCoords& c) {
  // Per track by start, an enclosing span before the spans it holds.
  std::sort(events.begin(), events.end(), [](const ProfileEvent& a, const ProfileEvent& b) {
    return std::tuple(SpanTrack(a.kind), a.start_us, -a.duration_us) <
           std::tuple(SpanTrack(b.kind), b.start_us, -b.duration_us);
  });
  std::vector<std::string> out = {
      Metadata(
          "process_name", rank, 0,
          absl::StrFormat("rank %d (tp %d, pp %d, dp %d, ep %d)", rank, c.tp, c.pp, c.dp, c.ep)),
      absl::StrFormat(
          R"({"name": "process_sort_index", "ph": "M", "pid": %d, "tid": 0, "args": {"sort_index": %d}})",
          rank, rank)};
  std::set<int> tracks = {0};
  for (const ProfileEvent& e : events) tracks.insert(SpanTrack(e.kind));
  for (int track : tracks) out.push_back(Metadata("thread_name", rank, track, TrackName(track)));
  for (const ProfileEvent& e : events) {
    const int track = SpanTrack(e.kind);
    std::string args;
    if (e.kind == SpanKind::kStep)
      args = absl::StrFormat(R"(, "args": {"step": %d})", e.arg);
    else if (e.arg >= 0)
      args = absl::StrFormat(R"(, "args": {"micro_batch": %d})", e.arg);
    out.push_back(absl::StrFormat(
        R"({"name": "%s", "cat": "%s", "ph": "X", "ts": %.3f, "dur": %.3f, "pid": %d, "tid": %d%s})",
        e.name, TrackName(track), e.start_us, e.duration_us, rank, track, args));
  }
  return absl::StrJoin(out, ",\n");
}

absl::Status TraceWriter::EndStep(int step, Communicator& world, const RankCoords& coords) {
  if (step != steps_.last) return absl::OkStatus();
  std::string mine =
      TraceEventsJson(Profiler::Get().TakeEvents(), world.ranks()[world.rank()], coords);
  // Strings travel as int32 words: a length, then the padded text.
  auto words = [](int64_t bytes) { return (bytes + 3) / 4; };
  if (world.rank() != 0) {
    int32_t length = static_cast<int32_t>(mine.size());
    mine.resize(words(length) * 4);
    world.Send(Tensor::View(&length, {1}, DType::kI32), 0, kLengthTag);
    world.Send(Tensor::View(mine.data(), {words(length)}, DType::kI32), 0, kEventsTag);
    return absl::OkStatus();
  }
  std::string json = "{\"traceEvents\": [\n" + mine;
  for (int r = 1; r < world.size(); ++r) {
    int32_t length = 0;
    world.Recv(Tensor::View(&length, {1}, DType::kI32), r, kLengthTag);
    std::string theirs(words(length) * 4, '\0');
    world.Recv(Tensor::View(theirs.data(), {words(length)}, DType::kI32), r, kEventsTag);
    theirs.resize(length);
    absl::StrAppend(&json, ",\n", theirs);
  }
  absl::StrAppend(&json, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"steps\": \"",
                  steps_.first, "-", steps_.last, "\"}}\n");
  std::error_code ignored;  // the open below reports a directory that could not be made
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ignored);
  return WriteFileAtomically(path_, json, "point log.trace_path at a writable file");
}

}  // namespace tetra
