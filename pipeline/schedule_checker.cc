#include "pipeline/schedule_checker.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status_macros.h"

namespace tetra {
namespace {

// What has happened to one (micro-batch, chunk) on its rank.
enum Step : uint8_t {
  kReceivedActivation = 1 << 0,
  kForwarded = 1 << 1,
  kSentActivation = 1 << 2,
  kReceivedGradient = 1 << 3,
  kBackwarded = 1 << 4,
  kSentGradient = 1 << 5,
};

Step StepOf(ActionType type) {
  switch (type) {
    case ActionType::kRecvActivation:
      return kReceivedActivation;
    case ActionType::kForward:
      return kForwarded;
    case ActionType::kSendActivation:
      return kSentActivation;
    case ActionType::kRecvGradient:
      return kReceivedGradient;
    case ActionType::kBackward:
      return kBackwarded;
    case ActionType::kSendGradient:
      return kSentGradient;
  }
  return kForwarded;
}

bool IsSend(ActionType type) { return type == ActionType::kSendActivation || type == ActionType::kSendGradient; }
bool IsGradient(ActionType type) { return type == ActionType::kSendGradient || type == ActionType::kRecvGradient; }

class Checker {
 public:
  Checker(const ScheduleSpec& spec, const std::vector<std::vector<Action>>& tables)
      : spec_(spec), tables_(tables), num_virtual_(spec.stages * spec.virtual_stages) {}

  absl::StatusOr<ScheduleReport> Run() {
    RETURN_IF_ERROR(ValidateScheduleSpec(spec_));
    if (static_cast<int>(tables_.size()) != spec_.stages) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule check: ", tables_.size(), " tables for ", spec_.stages, " pipeline ranks"));
    }
    report_.ranks.resize(spec_.stages);
    for (int rank = 0; rank < spec_.stages; ++rank) RETURN_IF_ERROR(CheckRank(rank));
    RETURN_IF_ERROR(CheckMatching());
    RETURN_IF_ERROR(CheckNoDeadlock());
    Simulate();
    return std::move(report_);
  }

 private:
  absl::Status Fail(int rank, size_t index, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("schedule check: rank ", rank, " action ", index, " (",
                                                   ActionText(tables_[rank][index]), "): ", what));
  }

  // The virtual stage a message starts from, for either of its ends.
  int SourceStage(int rank, const Action& a) const {
    const int stage = VirtualStage(spec_, rank, a.chunk);
    switch (a.type) {
      case ActionType::kRecvActivation:
        return stage - 1;
      case ActionType::kRecvGradient:
        return stage + 1;
      default:
        return stage;
    }
  }
  // A dense index for the message a send or receive belongs to.
  size_t MessageIndex(int rank, const Action& a) const {
    return (static_cast<size_t>(a.micro_batch) * num_virtual_ + SourceStage(rank, a)) * 2 + IsGradient(a.type);
  }
  size_t NumMessages() const { return static_cast<size_t>(spec_.micro_batches) * num_virtual_ * 2; }

  // Well-formedness, local order and peak activations of one rank's table.
  absl::Status CheckRank(int rank) {
    const std::vector<Action>& table = tables_[rank];
    const int v = spec_.virtual_stages;
    std::vector<uint8_t> done(static_cast<size_t>(spec_.micro_batches) * v, 0);
    RankReport& out = report_.ranks[rank];
    out.peak_activations_per_chunk.assign(v, 0);
    std::vector<int> live_per_chunk(v, 0);
    int live = 0;
    for (size_t i = 0; i < table.size(); ++i) {
      const Action& a = table[i];
      if (a.micro_batch < 0 || a.micro_batch >= spec_.micro_batches || a.chunk < 0 || a.chunk >= v) {
        return Fail(rank, i, absl::StrCat("outside ", spec_.micro_batches, " micro-batches x ", v, " chunks"));
      }
      const int stage = VirtualStage(spec_, rank, a.chunk);
      if (IsCompute(a.type)) {
        if (a.peer != -1) return Fail(rank, i, "a computation names no peer");
      } else {
        const int other = IsSend(a.type) == IsGradient(a.type) ? stage - 1 : stage + 1;
        if (other < 0 || other >= num_virtual_) {
          return Fail(rank, i, absl::StrCat("virtual stage ", stage, " of ", num_virtual_, " has no such neighbour"));
        }
        if (a.peer != other % spec_.stages) {
          return Fail(rank, i, absl::StrCat("the neighbouring virtual stage ", other, " is on rank ",
                                            other % spec_.stages));
        }
      }
      uint8_t& state = done[static_cast<size_t>(a.micro_batch) * v + a.chunk];
      const Step step = StepOf(a.type);
      if (state & step) return Fail(rank, i, "appears twice");
      const bool first = stage == 0, last = stage == num_virtual_ - 1;
      const uint8_t needs = a.type == ActionType::kForward          ? (first ? 0 : kReceivedActivation)
                            : a.type == ActionType::kSendActivation ? kForwarded
                            : a.type == ActionType::kBackward       ? (kForwarded | (last ? 0 : kReceivedGradient))
                            : a.type == ActionType::kSendGradient   ? kBackwarded
                                                                    : 0;
      if ((state & needs) != needs) {
        return Fail(rank, i, (state & kForwarded) || !(needs & kForwarded)
                                 ? "comes before the receive or computation it depends on"
                                 : "comes before its forward");
      }
      state |= step;
      const int delta = a.type == ActionType::kForward ? 1 : a.type == ActionType::kBackward ? -1 : 0;
      live += delta;
      live_per_chunk[a.chunk] += delta;
      out.peak_activations = std::max(out.peak_activations, live);
      int& chunk_peak = out.peak_activations_per_chunk[a.chunk];
      chunk_peak = std::max(chunk_peak, live_per_chunk[a.chunk]);
    }
    for (int micro_batch = 0; micro_batch < spec_.micro_batches; ++micro_batch) {
      for (int chunk = 0; chunk < v; ++chunk) {
        const uint8_t state = done[static_cast<size_t>(micro_batch) * v + chunk];
        for (ActionType type : {ActionType::kForward, ActionType::kBackward}) {
          if (!(state & StepOf(type))) {
            return absl::InvalidArgumentError(absl::StrCat("schedule check: rank ", rank, " never runs the ",
                                                           ActionText({type, micro_batch, chunk, -1})));
          }
        }
      }
    }
    if (out.peak_activations > ActivationBound(spec_, rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schedule check: rank ", rank, " holds the activations of ", out.peak_activations,
          " micro-batch chunks at once, more than the ", ScheduleKindName(spec_.kind), " bound of ",
          ActivationBound(spec_, rank)));
    }
    return absl::OkStatus();
  }

  // Every receive meets a send of the same message. (Every send meets its
  // receive already: CheckRank makes the receiving chunk's forward or backward
  // wait for it.)
  absl::Status CheckMatching() const {
    std::vector<bool> sent(NumMessages(), false);
    for (int rank = 0; rank < spec_.stages; ++rank) {
      for (const Action& a : tables_[rank]) {
        if (IsSend(a.type)) sent[MessageIndex(rank, a)] = true;
      }
    }
    for (int rank = 0; rank < spec_.stages; ++rank) {
      for (size_t i = 0; i < tables_[rank].size(); ++i) {
        const Action& a = tables_[rank][i];
        if (!IsCompute(a.type) && !IsSend(a.type) && !sent[MessageIndex(rank, a)]) {
          return Fail(rank, i, absl::StrCat("rank ", a.peer, " never sends it"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Rendezvous semantics: a rank runs its computations freely and stops at a
  // send or receive until the peer stands at the matching receive or send.
  absl::Status CheckNoDeadlock() const {
    std::vector<size_t> next(spec_.stages, 0);
    auto skip_compute = [&](int rank) {
      while (next[rank] < tables_[rank].size() && IsCompute(tables_[rank][next[rank]].type)) ++next[rank];
    };
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < spec_.stages; ++rank) {
        for (skip_compute(rank); next[rank] < tables_[rank].size(); skip_compute(rank)) {
          const Action& a = tables_[rank][next[rank]];
          skip_compute(a.peer);
          if (next[a.peer] == tables_[a.peer].size()) break;
          const Action& b = tables_[a.peer][next[a.peer]];
          if (b.peer != rank || IsSend(b.type) == IsSend(a.type) ||
              MessageIndex(a.peer, b) != MessageIndex(rank, a)) {
            break;
          }
          ++next[rank];
          ++next[a.peer];
          progress = true;
        }
      }
    }
    std::vector<std::string> waiting;
    for (int rank = 0; rank < spec_.stages; ++rank) {
      if (next[rank] < tables_[rank].size()) {
        waiting.push_back(absl::StrCat("rank ", rank, " waits at action ", next[rank], " (",
                                       ActionText(tables_[rank][next[rank]]), ")"));
      }
    }
    if (waiting.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("schedule check: deadlock with blocking sends and receives: ",
                                                   absl::StrJoin(waiting, "; ")));
  }

  // The equal-stage-time timeline: computations take their cost, a send
  // records when its data exists, a receive waits for that time.
  void Simulate() {
    std::vector<int> sent_at(NumMessages(), -1);
    std::vector<size_t> next(spec_.stages, 0);
    std::vector<int> clock(spec_.stages, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < spec_.stages; ++rank) {
        RankReport& out = report_.ranks[rank];
        for (; next[rank] < tables_[rank].size(); ++next[rank], progress = true) {
          const Action& a = tables_[rank][next[rank]];
          if (IsCompute(a.type)) {
            out.timeline.push_back({a, clock[rank], clock[rank] + ComputeTime(a.type)});
            clock[rank] = out.timeline.back().end;
            out.busy_time += ComputeTime(a.type);
          } else if (IsSend(a.type)) {
            sent_at[MessageIndex(rank, a)] = clock[rank];
          } else {
            const int arrival = sent_at[MessageIndex(rank, a)];
            if (arrival < 0) break;
            clock[rank] = std::max(clock[rank], arrival);
          }
        }
      }
    }
    for (int rank = 0; rank < spec_.stages; ++rank) {
      // Cannot stall: the rendezvous run above finished, and sends here never wait.
      TETRA_CHECK(next[rank] == tables_[rank].size()) << "timeline stalled at rank " << rank;
      report_.step_time = std::max(report_.step_time, clock[rank]);
    }
    for (RankReport& rank : report_.ranks) rank.idle_time = report_.step_time - rank.busy_time;
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Action>>& tables_;
  const int num_virtual_;
  ScheduleReport report_;
};

}  // namespace

double ScheduleReport::BubbleFraction() const {
  int idle = 0;
  for (const RankReport& rank : ranks) idle = std::max(idle, rank.idle_time);
  return step_time > 0 ? static_cast<double>(idle) / step_time : 0.0;
}

double IdealBubbleFraction(const ScheduleSpec& spec) {
  const int p = spec.stages;
  return static_cast<double>(p - 1) / (spec.virtual_stages * spec.micro_batches + p - 1);
}

int ActivationBound(const ScheduleSpec& spec, int rank) {
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
      return spec.micro_batches;
    case ScheduleKind::kOneFOneB:
      return spec.stages - rank;
    case ScheduleKind::kInterleaved:
      return 2 * (spec.stages - rank - 1) + (spec.virtual_stages - 1) * spec.stages + 1;
  }
  return 0;
}

absl::StatusOr<ScheduleReport> CheckSchedule(const ScheduleSpec& spec,
                                             const std::vector<std::vector<Action>>& tables) {
  return Checker(spec, tables).Run();
}

}  // namespace tetra
