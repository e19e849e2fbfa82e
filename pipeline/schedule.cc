#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "pipeline/stage_partition.h"

namespace tetra {
namespace {

// Chunk passes (stages x virtual_stages x micro-batches) of the largest
// schedule built: its tables then hold a few million actions, and every index
// into them fits an int. Real pipelines have a few thousand.
constexpr int64_t kMaxChunkPasses = int64_t{1} << 22;

StagePlacement PlacementOfSpec(const ScheduleSpec& spec) {
  return spec.kind == ScheduleKind::kDualPipeV ? StagePlacement::kVShape
                                               : StagePlacement::kInterleaved;
}

// A rank's computations in order, each marked when it pairs with the next
// (DualPipeV's F&B: one step of the ideal timeline, both outputs at its end).
struct Work {
  Action action;
  bool paired_with_next = false;
};

// Megatron-LM's virtual micro-batch k (0 <= k < m * v) on one rank: groups of
// `stages` micro-batches go through every chunk before the next group starts;
// backwards walk the chunks last to first. With one chunk, k is micro-batch k.
Action VirtualMicroBatch(const ScheduleSpec& spec, int k, ActionType type) {
  const int group = spec.stages * spec.virtual_stages;
  const int chunk_in_order = (k % group) / spec.stages;
  return Action{.type = type,
                .micro_batch = (k / group) * spec.stages + k % spec.stages,
                .chunk = type == ActionType::kForward ? chunk_in_order
                                                      : spec.virtual_stages - 1 - chunk_in_order};
}

// Forwards a rank runs before its first backward, for the 1F1B family.
int WarmupForwards(const ScheduleSpec& spec, int rank) {
  const int total = spec.micro_batches * spec.virtual_stages;
  const int later_stages = spec.stages - rank - 1;
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
      return total;
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kZeroBubbleH1:
      return std::min(later_stages, total);
    case ScheduleKind::kInterleaved:
      // The first backward of chunk v-1 needs the micro-batch to have passed
      // all (v - 1) p earlier virtual stages and this rank's later ones, and
      // its gradient to come back: twice the stages after this rank.
      return std::min(2 * later_stages + (spec.virtual_stages - 1) * spec.stages, total);
    case ScheduleKind::kDualPipeV:
      break;
  }
  TETRA_CHECK(false) << "no warm-up count for the " << ScheduleKindName(spec.kind) << " schedule";
  return 0;
}

// The forwards and backwards of `rank` in order: warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards. ZB-H1
// (split backwards) adds the W's: after its j-th backward the rank runs the
// oldest W it owes when j >= rank, and the rest at the end.
std::vector<Work> OneFOneBFamilyOrder(const ScheduleSpec& spec, int rank) {
  const int total = spec.micro_batches * spec.virtual_stages;
  const int warmup = WarmupForwards(spec, rank);
  const bool split = SplitsBackward(spec.kind);
  std::vector<Work> order;
  int backwards = 0, weights = 0;
  auto backward = [&](int k) {
    order.push_back({VirtualMicroBatch(spec, k, ActionType::kBackward)});
    if (split && backwards++ >= rank) {
      order.push_back({VirtualMicroBatch(spec, weights++, ActionType::kWeight)});
    }
  };
  for (int k = 0; k < warmup; ++k)
    order.push_back({VirtualMicroBatch(spec, k, ActionType::kForward)});
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back({VirtualMicroBatch(spec, k + warmup, ActionType::kForward)});
    backward(k);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  while (split && weights < total)
    order.push_back({VirtualMicroBatch(spec, weights++, ActionType::kWeight)});
  return order;
}

// DualPipeV's order on `rank` (schedule.h lists its eight steps), each chunk's
// micro-batches in turn and the postponed W's oldest first.
class DualPipeVOrder {
 public:
  DualPipeVOrder(const ScheduleSpec& spec, int rank) : spec_(spec), rank_(rank) {}

  std::vector<Work> Build() {
    const int p = spec_.stages, r = rank_, m = spec_.micro_batches;
    for (int i = 0; i < 2 * (p - r - 1); ++i) Forward(0);  // 1
    for (int i = 0; i < r + 1; ++i) {                      // 2
      Forward(0);
      Forward(1);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 3
      Backward(1, /*postpone_weight=*/true);
      Weight();
      Forward(1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {  // 4
      // dualpipev.py does not overlap the last rank's first F0 and B1 ("to
      // further reduce bubble size"); both their outputs stay on the rank.
      Forward(0, /*pair=*/!(i == 0 && r == p - 1));
      Backward(1);
      Forward(1, /*pair=*/true);
      Backward(0);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 5
      Backward(1);
      Forward(1, /*pair=*/true);
      Backward(0);
    }
    // 6: the W's of the last r + 1 of these 2 (r + 1) backwards wait.
    for (int i = 0, done = 0; i < r + 1; ++i) {
      for (int chunk : {1, 0}) Backward(chunk, /*postpone_weight=*/done++ >= r + 1);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 7
      Weight();
      Backward(0, /*postpone_weight=*/true);
    }
    for (int i = 0; i < r + 1; ++i) Weight();  // 8
    TETRA_CHECK(pending_.empty() && next_[0][0] == m && next_[0][1] == m && next_[1][0] == m &&
                next_[1][1] == m)
        << "DualPipeV order of rank " << r << " of " << p << " with " << m << " micro-batches";
    return std::move(order_);
  }

 private:
  void Forward(int chunk, bool pair = false) {
    order_.push_back({{ActionType::kForward, next_[chunk][0]++, chunk}, pair});
  }
  void Backward(int chunk, bool postpone_weight = false) {
    const Action backward{ActionType::kBackward, next_[chunk][1]++, chunk};
    order_.push_back({backward});
    const Action weight{ActionType::kWeight, backward.micro_batch, chunk};
    if (postpone_weight) {
      pending_.push_back(weight);
    } else {
      order_.push_back({weight});
    }
  }
  void Weight() {
    TETRA_CHECK(!pending_.empty())
        << "DualPipeV order of rank " << rank_ << ": no postponed weight gradient";
    order_.push_back({pending_.front()});
    pending_.pop_front();
  }

  const ScheduleSpec& spec_;
  const int rank_;
  int next_[2][2] = {};  // per chunk: the next forward's and backward's micro-batch
  std::deque<Action> pending_;
  std::vector<Work> order_;
};

std::vector<Work> ComputeOrder(const ScheduleSpec& spec, int rank) {
  if (spec.kind == ScheduleKind::kDualPipeV) return DualPipeVOrder(spec, rank).Build();
  return OneFOneBFamilyOrder(spec, rank);
}

// A table entry with its place in the ideal timeline: (time, kind, sender,
// sequence) sorts messages before the computation starting at the same time,
// messages of equal time by sending rank and then in the order the sender
// produced them, the same way on every rank. Both computations of a pair
// carry the pair's start, so nothing comes between them.
struct Placed {
  int time;
  int is_compute;
  int sender;
  int64_t sequence;
  Action action;
};

// The per-rank compute orders laid out in the ideal timeline (communication
// free), with each message inserted at the time its producer finishes.
class MessagePlacer {
 public:
  MessagePlacer(const ScheduleSpec& spec, const std::vector<std::vector<Work>>& orders)
      : spec_(spec),
        orders_(orders),
        num_virtual_(spec.stages * spec.virtual_stages),
        end_(static_cast<size_t>(spec.micro_batches) * num_virtual_ * 3, -1),
        placed_(spec.stages),
        next_(spec.stages, 0),
        clock_(spec.stages, 0),
        sequence_(spec.stages, 0) {}

  std::vector<std::vector<Action>> Tables() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < spec_.stages; ++rank) {
        while (PlaceNextStep(rank)) progress = true;
      }
    }
    std::vector<std::vector<Action>> tables(spec_.stages);
    for (int rank = 0; rank < spec_.stages; ++rank) {
      TETRA_CHECK(next_[rank] == orders_[rank].size())
          << "the compute orders of the " << ScheduleKindName(spec_.kind)
          << " schedule wait on each other at rank " << rank;
      std::sort(placed_[rank].begin(), placed_[rank].end(), [](const Placed& a, const Placed& b) {
        return std::tie(a.time, a.is_compute, a.sender, a.sequence) <
               std::tie(b.time, b.is_compute, b.sender, b.sequence);
      });
      for (const Placed& entry : placed_[rank]) tables[rank].push_back(entry.action);
    }
    return tables;
  }

 private:
  // Where the time the output of the forward (0), backward (1) or weight
  // gradient (2) of (micro-batch, virtual stage) exists is kept.
  size_t Slot(int micro_batch, int stage, ActionType type) const {
    const int kind = type == ActionType::kForward ? 0 : type == ActionType::kBackward ? 1 : 2;
    return (static_cast<size_t>(micro_batch) * num_virtual_ + stage) * 3 + kind;
  }

  // When the input of `a` on virtual stage `stage` exists; -1: not yet.
  int Ready(const Action& a, int stage) const {
    switch (a.type) {
      case ActionType::kForward:
        return stage > 0 ? end_[Slot(a.micro_batch, stage - 1, ActionType::kForward)] : 0;
      case ActionType::kBackward:
        return stage < num_virtual_ - 1
                   ? end_[Slot(a.micro_batch, stage + 1, ActionType::kBackward)]
                   : end_[Slot(a.micro_batch, stage, ActionType::kForward)];
      default:  // a weight gradient follows its backward on the same rank
        return end_[Slot(a.micro_batch, stage, ActionType::kBackward)];
    }
  }

  // Places rank's next step, a computation or a pair, if its inputs exist.
  // Both computations of a pair are placed at its start and their outputs
  // exist when it ends.
  bool PlaceNextStep(int rank) {
    const std::vector<Work>& order = orders_[rank];
    if (next_[rank] >= order.size()) return false;
    const size_t first = next_[rank], count = order[first].paired_with_next ? 2 : 1;
    TETRA_CHECK(first + count <= order.size())
        << "a pair at the end of rank " << rank << "'s order";
    int start = clock_[rank], finish = 0;
    for (size_t i = first; i < first + count && start >= 0; ++i) {
      const Action& a = order[i].action;
      const int input = Ready(a, VirtualStage(spec_, rank, a.chunk));
      start = input < 0 ? -1 : std::max(start, input);
      finish += ComputeTime(spec_.kind, a.type);
    }
    if (start < 0) return false;  // an input is not computed yet
    finish += start;
    int time = start;
    for (size_t i = first; i < first + count; ++i) {
      const Action& a = order[i].action;
      const int stage = VirtualStage(spec_, rank, a.chunk);
      time += ComputeTime(spec_.kind, a.type);
      const int done = count == 2 ? finish : time;
      end_[Slot(a.micro_batch, stage, a.type)] = done;
      placed_[rank].push_back({start, 1, 0, sequence_[rank]++, a});
      if (a.type != ActionType::kWeight) PlaceOutputMessage(rank, stage, a, done);
    }
    clock_[rank] = finish;
    next_[rank] += count;
    return true;
  }

  // The output goes to the next virtual stage (activation) or the previous
  // one (gradient), if there is one and another rank holds it.
  void PlaceOutputMessage(int rank, int stage, const Action& a, int done) {
    const bool forward = a.type == ActionType::kForward;
    const int to = forward ? stage + 1 : stage - 1;
    if (to < 0 || to >= num_virtual_) return;
    const auto [to_rank, to_chunk] = LocateVirtualStage(to, spec_.stages, PlacementOfSpec(spec_));
    if (to_rank == rank) return;
    const int64_t seq = sequence_[rank]++;
    const Action send{forward ? ActionType::kSendActivation : ActionType::kSendGradient,
                      a.micro_batch, a.chunk, to_rank};
    const Action receive{forward ? ActionType::kRecvActivation : ActionType::kRecvGradient,
                         a.micro_batch, to_chunk, rank};
    placed_[rank].push_back({done, 0, rank, seq, send});
    placed_[to_rank].push_back({done, 0, rank, seq, receive});
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Work>>& orders_;
  const int num_virtual_;
  std::vector<int> end_;
  std::vector<std::vector<Placed>> placed_;
  std::vector<size_t> next_;
  std::vector<int> clock_;
  std::vector<int64_t> sequence_;
};

}  // namespace

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "GPipe";
    case ScheduleKind::kOneFOneB:
      return "1F1B";
    case ScheduleKind::kInterleaved:
      return "interleaved 1F1B";
    case ScheduleKind::kZeroBubbleH1:
      return "ZB-H1";
    case ScheduleKind::kDualPipeV:
      return "DualPipeV";
  }
  return "unknown";
}

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZeroBubbleH1 || kind == ScheduleKind::kDualPipeV;
}

bool IsCompute(ActionType type) {
  return type == ActionType::kForward || type == ActionType::kBackward ||
         type == ActionType::kWeight;
}

bool IsPairedForwardBackward(ScheduleKind kind, const Action& first, const Action& second) {
  return kind == ScheduleKind::kDualPipeV && first.type == ActionType::kForward &&
         second.type == ActionType::kBackward && first.chunk != second.chunk;
}

std::string ActionText(const Action& action) {
  const auto [verb, preposition] = [&]() -> std::pair<const char*, const char*> {
    switch (action.type) {
      case ActionType::kForward:
        return {"forward", ""};
      case ActionType::kBackward:
        return {"backward", ""};
      case ActionType::kSendActivation:
        return {"send activation", " to"};
      case ActionType::kRecvActivation:
        return {"receive activation", " from"};
      case ActionType::kSendGradient:
        return {"send gradient", " to"};
      case ActionType::kRecvGradient:
        return {"receive gradient", " from"};
      case ActionType::kWeight:
        return {"weight gradient", ""};
    }
    return {"unknown action", ""};
  }();
  std::string text =
      absl::StrCat(verb, " of micro-batch ", action.micro_batch, " chunk ", action.chunk);
  if (!IsCompute(action.type)) absl::StrAppend(&text, preposition, " rank ", action.peer);
  return text;
}

int ComputeTime(ScheduleKind kind, ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return kForwardTime;
    case ActionType::kBackward:
      return SplitsBackward(kind) ? kInputGradientTime : kBackwardTime;
    case ActionType::kWeight:
      return kWeightGradientTime;
    default:
      break;
  }
  TETRA_CHECK(false) << "only computations take time in the cost model";
  return 0;
}

int VirtualStage(const ScheduleSpec& spec, int rank, int chunk) {
  return VirtualStageIndex(rank, chunk, spec.stages, PlacementOfSpec(spec));
}

int RankOfVirtualStage(const ScheduleSpec& spec, int stage) {
  return LocateVirtualStage(stage, spec.stages, PlacementOfSpec(spec)).pp_rank;
}

namespace {

// The counts: stages, chunks and micro-batches, and the passes they make.
absl::Status ValidateScheduleSize(const ScheduleSpec& spec) {
  if (spec.stages < 1 || spec.virtual_stages < 1) {
    return UserError(
        absl::StrCat("parallel.pipeline ", spec.stages, " and parallel.virtual_stages ",
                     spec.virtual_stages, " must both be at least 1"),
        "set parallel.pipeline to the number of pipeline stages and virtual_stages to 1 or more");
  }
  if (spec.micro_batches < 1) {
    return UserError(
        absl::StrCat("a pipeline step needs at least 1 micro-batch, but there are ",
                     spec.micro_batches),
        "micro-batches per step = train.global_batch_size / (train.micro_batch_size x data); raise "
        "global_batch_size");
  }
  const int64_t passes = int64_t{spec.stages} * spec.virtual_stages * spec.micro_batches;
  if (passes > kMaxChunkPasses) {
    return UserError(
        absl::StrCat("the pipeline schedule of parallel.pipeline ", spec.stages,
                     " x virtual_stages ", spec.virtual_stages, " x ", spec.micro_batches,
                     " micro-batches per step has ", passes, " chunk passes, more than the ",
                     kMaxChunkPasses, " tetra plans"),
        "micro-batches per step = train.global_batch_size / (train.micro_batch_size x data): raise "
        "micro_batch_size or lower global_batch_size");
  }
  return absl::OkStatus();
}

// DualPipeV's V: two chunks per rank, two or more ranks, and enough
// micro-batches to fill both arms.
absl::Status ValidateDualPipeV(const ScheduleSpec& spec) {
  if (spec.virtual_stages != 2) {
    return UserError(
        absl::StrCat("the DualPipeV schedule runs 2 model chunks per rank (rank r holds virtual "
                     "stages r and 2 x pipeline - 1 - r), but parallel.virtual_stages is ",
                     spec.virtual_stages),
        "set parallel.virtual_stages to 2 for parallel.schedule DUALPIPE_V");
  }
  if (spec.stages < 2) {
    return UserError(
        absl::StrCat("the DualPipeV schedule needs parallel.pipeline 2 or more, but it is ",
                     spec.stages),
        "set parallel.pipeline to 2 or more, or parallel.schedule to ONE_F_ONE_B");
  }
  if (spec.micro_batches < 2 * spec.stages) {
    return UserError(
        absl::StrCat(
            "the DualPipeV schedule needs at least 2 x parallel.pipeline = ", 2 * spec.stages,
            " micro-batches per step, but there are ", spec.micro_batches),
        absl::StrCat("micro-batches per step = train.global_batch_size / (train.micro_batch_size x "
                     "data); make it ",
                     2 * spec.stages, " or more, or use fewer pipeline stages"));
  }
  return absl::OkStatus();
}

// One chunk per rank, except in the interleaved schedule, which needs two or
// more ranks and whole rounds of micro-batches.
absl::Status ValidateChunksPerRank(const ScheduleSpec& spec) {
  if (spec.kind != ScheduleKind::kInterleaved && spec.virtual_stages != 1) {
    return UserError(absl::StrCat("the ", ScheduleKindName(spec.kind),
                                  " schedule runs 1 model chunk per rank, but ",
                                  "parallel.virtual_stages is ", spec.virtual_stages),
                     spec.kind == ScheduleKind::kZeroBubbleH1
                         ? "set parallel.virtual_stages to 1, or parallel.schedule to DUALPIPE_V "
                           "for 2 chunks per "
                           "rank with split backwards"
                         : "set parallel.virtual_stages to 1, or parallel.schedule to ONE_F_ONE_B "
                           "for the interleaved "
                           "schedule");
  }
  if (spec.kind == ScheduleKind::kInterleaved && spec.virtual_stages > 1) {
    if (spec.stages < 2) {
      return UserError(
          absl::StrCat("parallel.virtual_stages ", spec.virtual_stages,
                       " interleaves model chunks over pipeline ranks, but parallel.pipeline is ",
                       spec.stages),
          "set parallel.virtual_stages to 1, or parallel.pipeline to 2 or more");
    }
    if (spec.micro_batches % spec.stages != 0) {
      return UserError(
          absl::StrCat("the interleaved 1F1B schedule (parallel.virtual_stages ",
                       spec.virtual_stages, ") needs the micro-batches per step, ",
                       spec.micro_batches, ", to be a multiple of parallel.pipeline ", spec.stages),
          absl::StrCat(
              "micro-batches per step = train.global_batch_size / (train.micro_batch_size x "
              "data); make it a multiple of ",
              spec.stages, ", or set parallel.virtual_stages to 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateScheduleSpec(const ScheduleSpec& spec) {
  RETURN_IF_ERROR(ValidateScheduleSize(spec));
  if (spec.kind == ScheduleKind::kDualPipeV) return ValidateDualPipeV(spec);
  return ValidateChunksPerRank(spec);
}

absl::StatusOr<std::vector<std::vector<Action>>> BuildAllSchedules(const ScheduleSpec& spec) {
  RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  std::vector<std::vector<Work>> orders;
  for (int rank = 0; rank < spec.stages; ++rank) orders.push_back(ComputeOrder(spec, rank));
  return MessagePlacer(spec, orders).Tables();
}

absl::StatusOr<std::vector<Action>> BuildSchedule(const ScheduleSpec& spec, int rank) {
  // The message order of one rank depends on every rank's timeline.
  ASSIGN_OR_RETURN(std::vector<std::vector<Action>> tables, BuildAllSchedules(spec));
  TETRA_CHECK(rank >= 0 && rank < spec.stages) << "pipeline rank " << rank << " of " << spec.stages;
  return std::move(tables[rank]);
}

std::string BatchSplitHint(int64_t global_batch_size, int64_t micro_batch_size,
                           int64_t data_parallel) {
  auto splits = [&](int64_t micro, int64_t ranks) {
    return global_batch_size % (micro * ranks) == 0;
  };
  std::vector<std::string> fixes;
  int64_t micro = micro_batch_size - 1;
  while (micro >= 1 && !splits(micro, data_parallel)) --micro;
  if (micro >= 1) fixes.push_back(absl::StrCat("set train.micro_batch_size to ", micro));
  const int64_t per_step = micro_batch_size * data_parallel;
  fixes.push_back(absl::StrCat(fixes.empty() ? "set " : "",
                               "train.global_batch_size to a multiple of ", per_step, " (e.g. ",
                               (global_batch_size / per_step + 1) * per_step, ")"));
  int64_t ranks = data_parallel - 1;
  while (ranks >= 1 && !splits(micro_batch_size, ranks)) --ranks;
  if (ranks >= 1) {
    fixes.push_back(absl::StrCat("run ", ranks, " data-parallel rank", ranks == 1 ? "" : "s",
                                 " instead of ", data_parallel));
  }
  return absl::StrJoin(fixes, ", or ");
}

absl::StatusOr<ScheduleSpec> ScheduleSpecFromConfig(const TrainerConfig& config,
                                                    int data_parallel) {
  const ParallelConfig& parallel = config.parallel();
  const TrainConfig& train = config.train();
  const int64_t per_micro_batch = int64_t{train.micro_batch_size()} * data_parallel;
  if (per_micro_batch < 1) {
    return UserError(absl::StrCat("train.micro_batch_size ", train.micro_batch_size(),
                                  " x data-parallel size ", data_parallel, " must be at least 1"),
                     "set train.micro_batch_size to the samples per micro-batch, e.g. 1");
  }
  if (train.global_batch_size() % per_micro_batch != 0) {
    return UserError(
        absl::StrCat("train.global_batch_size ", train.global_batch_size(),
                     " is not a multiple of train.micro_batch_size ", train.micro_batch_size(),
                     " x data-parallel size ", data_parallel, " = ", per_micro_batch,
                     ", so the pipeline has no whole number of micro-batches per step"),
        BatchSplitHint(train.global_batch_size(), train.micro_batch_size(), data_parallel));
  }
  ScheduleSpec spec;
  spec.stages = parallel.pipeline();
  spec.virtual_stages = parallel.virtual_stages();
  spec.micro_batches = static_cast<int>(train.global_batch_size() / per_micro_batch);
  // One stage has no bubble to trade memory for: each micro-batch's forward,
  // then its backward, whatever parallel.schedule says (GPipe's all-forwards-
  // first would hold every micro-batch's activations, and ZB-H1's W's have no
  // idle time to fill). DualPipeV needs two stages; its spec says so.
  const bool one_stage = spec.stages == 1;
  switch (parallel.schedule()) {
    case ParallelConfig::GPIPE:
      spec.kind = one_stage ? ScheduleKind::kOneFOneB : ScheduleKind::kGPipe;
      break;
    case ParallelConfig::ZB_H1:
      spec.kind = one_stage ? ScheduleKind::kOneFOneB : ScheduleKind::kZeroBubbleH1;
      break;
    case ParallelConfig::DUALPIPE_V:
      spec.kind = ScheduleKind::kDualPipeV;
      break;
    default:
      spec.kind = ScheduleKind::kOneFOneB;
      break;
  }
  if (spec.kind == ScheduleKind::kOneFOneB && spec.virtual_stages > 1)
    spec.kind = ScheduleKind::kInterleaved;
  RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  return spec;
}

}  // namespace tetra
