#include "pipeline/schedule_checker.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

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
  kWeighted = 1 << 6,
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
    case ActionType::kWeight:
      return kWeighted;
  }
  return kForwarded;
}

bool IsSend(ActionType type) {
  return type == ActionType::kSendActivation || type == ActionType::kSendGradient;
}
bool IsGradient(ActionType type) {
  return type == ActionType::kSendGradient || type == ActionType::kRecvGradient;
}

absl::Status ActionError(const std::vector<std::vector<Action>>& orders, int rank, size_t index,
                         const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("schedule check: rank ", rank, " action ", index,
                                                 " (", ActionText(orders[rank][index]),
                                                 "): ", what));
}

// "rank 1 waits at action 4 (...); ..." for every rank r with next[r] short
// of its order's end; empty when every rank finished.
std::string StuckRanks(const std::vector<std::vector<Action>>& orders,
                       const std::vector<size_t>& next) {
  std::vector<std::string> stuck;
  for (size_t rank = 0; rank < orders.size(); ++rank) {
    if (next[rank] < orders[rank].size()) {
      stuck.push_back(absl::StrCat("rank ", rank, " waits at action ", next[rank], " (",
                                   ActionText(orders[rank][next[rank]]), ")"));
    }
  }
  return absl::StrJoin(stuck, "; ");
}

// The virtual stage a message starts from, for either of its ends.
int SourceStage(const ScheduleSpec& spec, int rank, const Action& a) {
  const int stage = VirtualStage(spec, rank, a.chunk);
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
size_t MessageIndex(const ScheduleSpec& spec, int rank, const Action& a) {
  const int num_virtual = spec.stages * spec.virtual_stages;
  return (static_cast<size_t>(a.micro_batch) * num_virtual + SourceStage(spec, rank, a)) * 2 +
         IsGradient(a.type);
}
size_t NumMessages(const ScheduleSpec& spec) {
  return static_cast<size_t>(spec.micro_batches) * spec.stages * spec.virtual_stages * 2;
}

// One table or record per rank, and every action names a micro-batch and a
// chunk of the spec, a computation no peer, a weight gradient only where the
// kind splits backwards, and a message the rank holding the neighbouring
// virtual stage it goes to or comes from, when another rank holds it.
absl::Status CheckActionsInSpec(const ScheduleSpec& spec,
                                const std::vector<std::vector<Action>>& orders) {
  RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  if (static_cast<int>(orders.size()) != spec.stages) {
    return absl::InvalidArgumentError(absl::StrCat("schedule check: ", orders.size(),
                                                   " tables for ", spec.stages, " pipeline ranks"));
  }
  const int v = spec.virtual_stages, num_virtual = spec.stages * v;
  for (int rank = 0; rank < spec.stages; ++rank) {
    for (size_t i = 0; i < orders[rank].size(); ++i) {
      const Action& a = orders[rank][i];
      if (a.micro_batch < 0 || a.micro_batch >= spec.micro_batches || a.chunk < 0 || a.chunk >= v) {
        return ActionError(
            orders, rank, i,
            absl::StrCat("outside ", spec.micro_batches, " micro-batches x ", v, " chunks"));
      }
      if (IsCompute(a.type)) {
        if (a.peer != -1) return ActionError(orders, rank, i, "a computation names no peer");
        if (a.type == ActionType::kWeight && !SplitsBackward(spec.kind)) {
          return ActionError(
              orders, rank, i,
              absl::StrCat("the ", ScheduleKindName(spec.kind),
                           " schedule runs whole backwards, with no separate weight gradient"));
        }
        continue;
      }
      const int stage = VirtualStage(spec, rank, a.chunk);
      const int other = IsSend(a.type) == IsGradient(a.type) ? stage - 1 : stage + 1;
      if (other < 0 || other >= num_virtual) {
        return ActionError(
            orders, rank, i,
            absl::StrCat("virtual stage ", stage, " of ", num_virtual, " has no such neighbour"));
      }
      const int other_rank = RankOfVirtualStage(spec, other);
      if (other_rank == rank) {
        return ActionError(
            orders, rank, i,
            absl::StrCat("virtual stages ", std::min(stage, other), " and ", std::max(stage, other),
                         " are both on rank ", rank, ": their data passes without a message"));
      }
      if (a.peer != other_rank) {
        return ActionError(
            orders, rank, i,
            absl::StrCat("the neighbouring virtual stage ", other, " is on rank ", other_rank));
      }
    }
  }
  return absl::OkStatus();
}

class Checker {
 public:
  Checker(const ScheduleSpec& spec, const std::vector<std::vector<Action>>& tables)
      : spec_(spec), tables_(tables) {}

  absl::StatusOr<ScheduleReport> Run() {
    RETURN_IF_ERROR(CheckActionsInSpec(spec_, tables_));
    for (int rank = 0; rank < spec_.stages; ++rank) RETURN_IF_ERROR(CheckRank(rank));
    RETURN_IF_ERROR(CheckMatching());
    RETURN_IF_ERROR(CheckNoDeadlock());
    ASSIGN_OR_RETURN(ScheduleReport report, SimulateTimeline(spec_, tables_));
    for (int rank = 0; rank < spec_.stages; ++rank) {
      if (report.ranks[rank].peak_activations > ActivationBound(spec_, rank)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule check: rank ", rank, " holds the activations of ",
            report.ranks[rank].peak_activations, " micro-batch chunks at once, more than the ",
            ScheduleKindName(spec_.kind), " bound of ", ActivationBound(spec_, rank)));
      }
    }
    return report;
  }

 private:
  absl::Status Fail(int rank, size_t index, const std::string& what) const {
    return ActionError(tables_, rank, index, what);
  }

  // Local order of one rank's table: each (micro-batch, chunk) runs every step
  // once, after what it depends on. The input of a forward, or the output
  // gradient of a backward, is received from the rank holding the
  // neighbouring virtual stage, or, where this rank holds it too (DualPipeV's
  // middle), read from that chunk's forward or backward of the same
  // micro-batch, which must come first.
  absl::Status CheckRank(int rank) const {
    std::vector<uint8_t> done(static_cast<size_t>(spec_.micro_batches) * spec_.virtual_stages, 0);
    for (size_t i = 0; i < tables_[rank].size(); ++i) {
      RETURN_IF_ERROR(CheckAction(rank, i, done));
    }
    return CheckEveryStepRan(rank, done);
  }

  // Where `done` keeps the steps of (micro-batch, chunk) that have run.
  size_t StateIndex(int micro_batch, int chunk) const {
    return static_cast<size_t>(micro_batch) * spec_.virtual_stages + chunk;
  }

  // The chunk of `rank` holding virtual stage `stage`, or -1.
  int LocalChunk(int rank, int stage) const {
    for (int chunk = 0; chunk < spec_.virtual_stages; ++chunk) {
      if (VirtualStage(spec_, rank, chunk) == stage) return chunk;
    }
    return -1;
  }

  // What must have happened to a (micro-batch, chunk) before an action of
  // `type`, given what its computation receives from another rank.
  static uint8_t Needs(ActionType type, uint8_t received) {
    switch (type) {
      case ActionType::kForward:
        return received;
      case ActionType::kSendActivation:
        return kForwarded;
      case ActionType::kBackward:
        return kForwarded | received;
      case ActionType::kSendGradient:
      case ActionType::kWeight:
        return kBackwarded;
      default:
        return 0;
    }
  }

  // Table entry i of `rank` runs once, after what it depends on.
  absl::Status CheckAction(int rank, size_t i, std::vector<uint8_t>& done) const {
    const Action& a = tables_[rank][i];
    const int stage = VirtualStage(spec_, rank, a.chunk);
    uint8_t& state = done[StateIndex(a.micro_batch, a.chunk)];
    const Step step = StepOf(a.type);
    if (state & step) return Fail(rank, i, "appears twice");
    const bool first = stage == 0, last = stage == spec_.stages * spec_.virtual_stages - 1;
    // The neighbouring virtual stage this computation reads, and its chunk
    // when it is on this rank.
    const int neighbour = a.type == ActionType::kForward ? stage - 1 : stage + 1;
    const bool reads_neighbour = a.type == ActionType::kForward || a.type == ActionType::kBackward;
    const int local = reads_neighbour ? LocalChunk(rank, neighbour) : -1;
    const uint8_t received =
        a.type == ActionType::kForward    ? (first || local >= 0 ? 0 : kReceivedActivation)
        : a.type == ActionType::kBackward ? (last || local >= 0 ? 0 : kReceivedGradient)
                                          : 0;
    const uint8_t needs = Needs(a.type, received);
    if ((state & needs) != needs) {
      if (a.type == ActionType::kWeight) return Fail(rank, i, "comes before its backward");
      return Fail(rank, i,
                  (state & kForwarded) || !(needs & kForwarded)
                      ? "comes before the receive or computation it depends on"
                      : "comes before its forward");
    }
    if (local >= 0) {
      const Step input = a.type == ActionType::kForward ? kForwarded : kBackwarded;
      if (!(done[StateIndex(a.micro_batch, local)] & input)) {
        return Fail(
            rank, i,
            absl::StrCat("comes before the ", ActionText({a.type, a.micro_batch, local, -1}),
                         ", whose output it reads on this rank (virtual stages ",
                         std::min(stage, neighbour), " and ", std::max(stage, neighbour),
                         " are both here)"));
      }
    }
    state |= step;
    return absl::OkStatus();
  }

  // Every (micro-batch, chunk) of `rank` ran its forward, backward and, in
  // the split schedules, its weight gradients.
  absl::Status CheckEveryStepRan(int rank, const std::vector<uint8_t>& done) const {
    const bool split = SplitsBackward(spec_.kind);
    for (int micro_batch = 0; micro_batch < spec_.micro_batches; ++micro_batch) {
      for (int chunk = 0; chunk < spec_.virtual_stages; ++chunk) {
        const uint8_t state = done[StateIndex(micro_batch, chunk)];
        for (ActionType type : {ActionType::kForward, ActionType::kBackward, ActionType::kWeight}) {
          if (type == ActionType::kWeight && !split) continue;
          if (!(state & StepOf(type))) {
            return absl::InvalidArgumentError(
                absl::StrCat("schedule check: rank ", rank, " never runs the ",
                             ActionText({type, micro_batch, chunk, -1})));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  // Every receive meets a send of the same message. (Every send meets its
  // receive already: CheckRank makes the receiving chunk's forward or backward
  // wait for it.)
  absl::Status CheckMatching() const {
    std::vector<bool> sent(NumMessages(spec_), false);
    for (int rank = 0; rank < spec_.stages; ++rank) {
      for (const Action& a : tables_[rank]) {
        if (IsSend(a.type)) sent[MessageIndex(spec_, rank, a)] = true;
      }
    }
    for (int rank = 0; rank < spec_.stages; ++rank) {
      for (size_t i = 0; i < tables_[rank].size(); ++i) {
        const Action& a = tables_[rank][i];
        if (!IsCompute(a.type) && !IsSend(a.type) && !sent[MessageIndex(spec_, rank, a)]) {
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
      while (next[rank] < tables_[rank].size() && IsCompute(tables_[rank][next[rank]].type))
        ++next[rank];
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
              MessageIndex(spec_, a.peer, b) != MessageIndex(spec_, rank, a)) {
            break;
          }
          ++next[rank];
          ++next[a.peer];
          progress = true;
        }
      }
    }
    const std::string waiting = StuckRanks(tables_, next);
    if (waiting.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("schedule check: deadlock with blocking sends and receives: ", waiting));
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Action>>& tables_;
};

}  // namespace

absl::StatusOr<ScheduleReport> SimulateTimeline(const ScheduleSpec& spec,
                                                const std::vector<std::vector<Action>>& orders) {
  RETURN_IF_ERROR(CheckActionsInSpec(spec, orders));
  ScheduleReport report;
  report.ranks.resize(spec.stages);
  std::vector<int> sent_at(NumMessages(spec), -1);
  std::vector<size_t> next(spec.stages, 0);
  std::vector<int> clock(spec.stages, 0), live(spec.stages, 0);
  std::vector<std::vector<int>> live_per_chunk(spec.stages,
                                               std::vector<int>(spec.virtual_stages, 0));
  for (RankReport& rank : report.ranks)
    rank.peak_activations_per_chunk.assign(spec.virtual_stages, 0);
  // A chunk's activations are live from its forward until the computation
  // that last reads them: the weight gradient where backwards split.
  const ActionType frees = SplitsBackward(spec.kind) ? ActionType::kWeight : ActionType::kBackward;
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < spec.stages; ++rank) {
      RankReport& out = report.ranks[rank];
      for (; next[rank] < orders[rank].size(); ++next[rank], progress = true) {
        const Action& a = orders[rank][next[rank]];
        if (IsCompute(a.type)) {
          const int duration = ComputeTime(spec.kind, a.type);
          out.timeline.push_back({a, clock[rank], clock[rank] + duration});
          clock[rank] = out.timeline.back().end;
          out.busy_time += duration;
          const int delta = a.type == ActionType::kForward ? 1 : a.type == frees ? -1 : 0;
          out.peak_activations = std::max(out.peak_activations, live[rank] += delta);
          int& chunk_peak = out.peak_activations_per_chunk[a.chunk];
          chunk_peak = std::max(chunk_peak, live_per_chunk[rank][a.chunk] += delta);
        } else if (IsSend(a.type)) {
          sent_at[MessageIndex(spec, rank, a)] = clock[rank];
        } else {
          const int arrival = sent_at[MessageIndex(spec, rank, a)];
          if (arrival < 0) break;
          clock[rank] = std::max(clock[rank], arrival);
        }
      }
    }
  }
  const std::string stalled = StuckRanks(orders, next);
  if (!stalled.empty())
    return absl::InvalidArgumentError(absl::StrCat("schedule timeline: stalled: ", stalled));
  for (int rank = 0; rank < spec.stages; ++rank)
    report.step_time = std::max(report.step_time, clock[rank]);
  for (RankReport& rank : report.ranks) rank.idle_time = report.step_time - rank.busy_time;
  return report;
}

double ScheduleReport::BubbleFraction() const {
  int idle = 0;
  for (const RankReport& rank : ranks) idle = std::max(idle, rank.idle_time);
  return step_time > 0 ? static_cast<double>(idle) / step_time : 0.0;
}

double IdealBubbleFraction(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches;
  switch (spec.kind) {
    case ScheduleKind::kZeroBubbleH1:
      return m >= p ? static_cast<double>(p - 1) / (3 * m + p - 1)
                    : static_cast<double>(2 * p - m - 1) / (2 * m + 2 * p - 1);
    case ScheduleKind::kDualPipeV:
      return static_cast<double>(p - 1) / (6 * m + p - 1);
    default:
      return static_cast<double>(p - 1) / (spec.virtual_stages * m + p - 1);
  }
}

std::string IdealBubbleFormula(const ScheduleSpec& spec) {
  switch (spec.kind) {
    case ScheduleKind::kZeroBubbleH1:
      return spec.micro_batches >= spec.stages ? "(p-1)/(3*m+p-1)" : "(2*p-m-1)/(2*m+2*p-1)";
    case ScheduleKind::kDualPipeV:
      return "(p-1)/(6*m+p-1)";
    default:
      return spec.virtual_stages > 1 ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)";
  }
}

int ActivationBound(const ScheduleSpec& spec, int rank) {
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
      return spec.micro_batches;
    case ScheduleKind::kOneFOneB:
      return spec.stages - rank;
    case ScheduleKind::kInterleaved:
      return 2 * (spec.stages - rank - 1) + (spec.virtual_stages - 1) * spec.stages + 1;
    case ScheduleKind::kZeroBubbleH1:
      return spec.stages;
    case ScheduleKind::kDualPipeV:
      return 2 * spec.stages + 1;
  }
  return 0;
}

absl::StatusOr<ScheduleReport> CheckSchedule(const ScheduleSpec& spec,
                                             const std::vector<std::vector<Action>>& tables) {
  return Checker(spec, tables).Run();
}

absl::StatusOr<std::vector<Action>> MakeSchedule(const TrainerConfig& config, int data_parallel,
                                                 int pp_rank) {
  ASSIGN_OR_RETURN(const ScheduleSpec spec, ScheduleSpecFromConfig(config, data_parallel));
  ASSIGN_OR_RETURN(std::vector<std::vector<Action>> tables, BuildAllSchedules(spec));
  const absl::Status checked = CheckSchedule(spec, tables).status();
  TETRA_CHECK(checked.ok()) << "the " << ScheduleKindName(spec.kind)
                            << " schedule's tables fail the checker: " << checked.message();
  return std::move(tables[pp_rank]);
}

}  // namespace tetra
