#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdint>
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

// Megatron-LM's virtual micro-batch k (0 <= k < m * v) on one rank: groups of
// `stages` micro-batches go through every chunk before the next group starts;
// backwards walk the chunks last to first. With one chunk, k is micro-batch k.
Action VirtualMicroBatch(const ScheduleSpec& spec, int k, ActionType type) {
  const int group = spec.stages * spec.virtual_stages;
  const int chunk_in_order = (k % group) / spec.stages;
  return Action{.type = type,
                .micro_batch = (k / group) * spec.stages + k % spec.stages,
                .chunk = type == ActionType::kForward ? chunk_in_order : spec.virtual_stages - 1 - chunk_in_order};
}

// Forwards a rank runs before its first backward.
int WarmupForwards(const ScheduleSpec& spec, int rank) {
  const int total = spec.micro_batches * spec.virtual_stages;
  const int later_stages = spec.stages - rank - 1;
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
      return total;
    case ScheduleKind::kOneFOneB:
      return std::min(later_stages, total);
    case ScheduleKind::kInterleaved:
      // The first backward of chunk v-1 needs the micro-batch to have passed
      // all (v - 1) p earlier virtual stages and this rank's later ones, and
      // its gradient to come back: twice the stages after this rank.
      return std::min(2 * later_stages + (spec.virtual_stages - 1) * spec.stages, total);
  }
  TETRA_CHECK(false) << "unknown schedule kind";
  return 0;
}

// The forwards and backwards of `rank` in order: warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards.
std::vector<Action> ComputeOrder(const ScheduleSpec& spec, int rank) {
  const int total = spec.micro_batches * spec.virtual_stages;
  const int warmup = WarmupForwards(spec, rank);
  std::vector<Action> order;
  for (int k = 0; k < warmup; ++k) order.push_back(VirtualMicroBatch(spec, k, ActionType::kForward));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(VirtualMicroBatch(spec, k + warmup, ActionType::kForward));
    order.push_back(VirtualMicroBatch(spec, k, ActionType::kBackward));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(VirtualMicroBatch(spec, k, ActionType::kBackward));
  return order;
}

// A table entry with its place in the ideal timeline: (time, kind, sender)
// sorts messages before the computation starting at the same time, and
// messages of equal time by sending rank, the same way on every rank.
struct Placed {
  int time;
  int is_compute;
  int sender;
  Action action;
};

// The per-rank compute orders laid out in the ideal timeline (communication
// free), with each message inserted at the time its producer finishes.
std::vector<std::vector<Action>> PlaceMessages(const ScheduleSpec& spec,
                                               const std::vector<std::vector<Action>>& orders) {
  const int p = spec.stages;
  const int num_virtual = p * spec.virtual_stages;
  // End time of the forward (slot 0) and backward (slot 1) of (micro-batch, virtual stage).
  std::vector<int> end(static_cast<size_t>(spec.micro_batches) * num_virtual * 2, -1);
  auto slot = [&](int micro_batch, int stage, ActionType type) {
    return (static_cast<size_t>(micro_batch) * num_virtual + stage) * 2 + (type == ActionType::kBackward);
  };
  std::vector<std::vector<Placed>> placed(p);
  std::vector<size_t> next(p, 0);
  std::vector<int> clock(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < p; ++rank) {
      for (; next[rank] < orders[rank].size(); ++next[rank]) {
        const Action& a = orders[rank][next[rank]];
        const int stage = VirtualStage(spec, rank, a.chunk);
        int ready = 0;
        if (a.type == ActionType::kForward && stage > 0) {
          ready = end[slot(a.micro_batch, stage - 1, ActionType::kForward)];
        } else if (a.type == ActionType::kBackward) {
          ready = stage < num_virtual - 1 ? end[slot(a.micro_batch, stage + 1, ActionType::kBackward)]
                                          : end[slot(a.micro_batch, stage, ActionType::kForward)];
        }
        if (ready < 0) break;  // its input is not computed yet
        const int start = std::max(clock[rank], ready);
        clock[rank] = start + ComputeTime(a.type);
        end[slot(a.micro_batch, stage, a.type)] = clock[rank];
        placed[rank].push_back({start, 1, 0, a});
        // The output goes to the next virtual stage (activation) or the
        // previous one (gradient), if there is one.
        const bool forward = a.type == ActionType::kForward;
        const int to = forward ? stage + 1 : stage - 1;
        if (to >= 0 && to < num_virtual) {
          const int to_rank = to % p;
          placed[rank].push_back(
              {clock[rank], 0, rank,
               {forward ? ActionType::kSendActivation : ActionType::kSendGradient, a.micro_batch, a.chunk, to_rank}});
          placed[to_rank].push_back(
              {clock[rank], 0, rank,
               {forward ? ActionType::kRecvActivation : ActionType::kRecvGradient, a.micro_batch, to / p, rank}});
        }
        progress = true;
      }
    }
  }
  std::vector<std::vector<Action>> tables(p);
  for (int rank = 0; rank < p; ++rank) {
    TETRA_CHECK(next[rank] == orders[rank].size())
        << "the compute orders of the " << ScheduleKindName(spec.kind) << " schedule wait on each other at rank "
        << rank;
    std::sort(placed[rank].begin(), placed[rank].end(), [](const Placed& a, const Placed& b) {
      return std::tie(a.time, a.is_compute, a.sender) < std::tie(b.time, b.is_compute, b.sender);
    });
    for (const Placed& entry : placed[rank]) tables[rank].push_back(entry.action);
  }
  return tables;
}

}  // namespace

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "GPipe";
    case ScheduleKind::kOneFOneB:
      return "1F1B";
    case ScheduleKind::kInterleaved:
      return "interleaved 1F1B";
  }
  return "unknown";
}

bool IsCompute(ActionType type) { return type == ActionType::kForward || type == ActionType::kBackward; }

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
    }
    return {"unknown action", ""};
  }();
  std::string text = absl::StrCat(verb, " of micro-batch ", action.micro_batch, " chunk ", action.chunk);
  if (!IsCompute(action.type)) absl::StrAppend(&text, preposition, " rank ", action.peer);
  return text;
}

int ComputeTime(ActionType type) {
  TETRA_CHECK(IsCompute(type)) << "only forwards and backwards take time in the cost model";
  return type == ActionType::kForward ? kForwardTime : kBackwardTime;
}

int VirtualStage(const ScheduleSpec& spec, int rank, int chunk) {
  return VirtualStageIndex(rank, chunk, spec.stages);
}

absl::Status ValidateScheduleSpec(const ScheduleSpec& spec) {
  if (spec.stages < 1 || spec.virtual_stages < 1) {
    return UserError(absl::StrCat("parallel.pipeline ", spec.stages, " and parallel.virtual_stages ",
                                  spec.virtual_stages, " must both be at least 1"),
                     "set parallel.pipeline to the number of pipeline stages and virtual_stages to 1 or more");
  }
  if (spec.micro_batches < 1) {
    return UserError(absl::StrCat("a pipeline step needs at least 1 micro-batch, but there are ", spec.micro_batches),
                     "micro-batches per step = train.global_batch_size / (train.micro_batch_size x data); raise "
                     "global_batch_size");
  }
  const int64_t passes = int64_t{spec.stages} * spec.virtual_stages * spec.micro_batches;
  if (passes > kMaxChunkPasses) {
    return UserError(absl::StrCat("the pipeline schedule of parallel.pipeline ", spec.stages, " x virtual_stages ",
                                  spec.virtual_stages, " x ", spec.micro_batches, " micro-batches per step has ",
                                  passes, " chunk passes, more than the ", kMaxChunkPasses, " tetra plans"),
                     "micro-batches per step = train.global_batch_size / (train.micro_batch_size x data): raise "
                     "micro_batch_size or lower global_batch_size");
  }
  if (spec.kind != ScheduleKind::kInterleaved && spec.virtual_stages != 1) {
    return UserError(absl::StrCat("the ", ScheduleKindName(spec.kind), " schedule runs 1 model chunk per rank, but ",
                                  "parallel.virtual_stages is ", spec.virtual_stages),
                     "set parallel.virtual_stages to 1, or parallel.schedule to ONE_F_ONE_B for the interleaved "
                     "schedule");
  }
  if (spec.kind == ScheduleKind::kInterleaved && spec.virtual_stages > 1) {
    if (spec.stages < 2) {
      return UserError(absl::StrCat("parallel.virtual_stages ", spec.virtual_stages,
                                    " interleaves model chunks over pipeline ranks, but parallel.pipeline is ",
                                    spec.stages),
                       "set parallel.virtual_stages to 1, or parallel.pipeline to 2 or more");
    }
    if (spec.micro_batches % spec.stages != 0) {
      return UserError(absl::StrCat("the interleaved 1F1B schedule (parallel.virtual_stages ", spec.virtual_stages,
                                    ") needs the micro-batches per step, ", spec.micro_batches,
                                    ", to be a multiple of parallel.pipeline ", spec.stages),
                       absl::StrCat("micro-batches per step = train.global_batch_size / (train.micro_batch_size x "
                                    "data); make it a multiple of ",
                                    spec.stages, ", or set parallel.virtual_stages to 1"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<Action>>> BuildAllSchedules(const ScheduleSpec& spec) {
  RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  std::vector<std::vector<Action>> orders;
  for (int rank = 0; rank < spec.stages; ++rank) orders.push_back(ComputeOrder(spec, rank));
  return PlaceMessages(spec, orders);
}

absl::StatusOr<std::vector<Action>> BuildSchedule(const ScheduleSpec& spec, int rank) {
  // The message order of one rank depends on every rank's timeline.
  ASSIGN_OR_RETURN(std::vector<std::vector<Action>> tables, BuildAllSchedules(spec));
  TETRA_CHECK(rank >= 0 && rank < spec.stages) << "pipeline rank " << rank << " of " << spec.stages;
  return std::move(tables[rank]);
}

std::string BatchSplitHint(int64_t global_batch_size, int64_t micro_batch_size, int64_t data_parallel) {
  auto splits = [&](int64_t micro, int64_t ranks) { return global_batch_size % (micro * ranks) == 0; };
  std::vector<std::string> fixes;
  int64_t micro = micro_batch_size - 1;
  while (micro >= 1 && !splits(micro, data_parallel)) --micro;
  if (micro >= 1) fixes.push_back(absl::StrCat("set train.micro_batch_size to ", micro));
  const int64_t per_step = micro_batch_size * data_parallel;
  fixes.push_back(absl::StrCat(fixes.empty() ? "set " : "", "train.global_batch_size to a multiple of ", per_step,
                               " (e.g. ", (global_batch_size / per_step + 1) * per_step, ")"));
  int64_t ranks = data_parallel - 1;
  while (ranks >= 1 && !splits(micro_batch_size, ranks)) --ranks;
  if (ranks >= 1) {
    fixes.push_back(absl::StrCat("run ", ranks, " data-parallel rank", ranks == 1 ? "" : "s", " instead of ",
                                 data_parallel));
  }
  return absl::StrJoin(fixes, ", or ");
}

absl::StatusOr<ScheduleSpec> ScheduleSpecFromConfig(const TrainerConfig& config, int data_parallel) {
  const ParallelConfig& parallel = config.parallel();
  const TrainConfig& train = config.train();
  const int64_t per_micro_batch = int64_t{train.micro_batch_size()} * data_parallel;
  if (per_micro_batch < 1) {
    return UserError(absl::StrCat("train.micro_batch_size ", train.micro_batch_size(), " x data-parallel size ",
                                  data_parallel, " must be at least 1"),
                     "set train.micro_batch_size to the samples per micro-batch, e.g. 1");
  }
  if (train.global_batch_size() % per_micro_batch != 0) {
    return UserError(absl::StrCat("train.global_batch_size ", train.global_batch_size(),
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
  // first would hold every micro-batch's activations).
  const bool gpipe = parallel.schedule() == ParallelConfig::GPIPE && spec.stages > 1;
  spec.kind = gpipe                     ? ScheduleKind::kGPipe
              : spec.virtual_stages > 1 ? ScheduleKind::kInterleaved
                                        : ScheduleKind::kOneFOneB;
  RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  const int layers = config.model().num_hidden_layers();
  const int chunks = spec.stages * spec.virtual_stages;
  if (spec.kind == ScheduleKind::kInterleaved && parallel.pipeline_layers().empty() && layers % chunks != 0) {
    return UserError(absl::StrCat("the interleaved 1F1B schedule splits model.num_hidden_layers ", layers,
                                  " into parallel.pipeline ", spec.stages, " x parallel.virtual_stages ",
                                  spec.virtual_stages, " = ", chunks, " equal chunks, but ", layers,
                                  " is not a multiple of ", chunks),
                     absl::StrCat("set num_hidden_layers to a multiple of ", chunks,
                                  ", or choose virtual_stages so that pipeline x virtual_stages divides it"));
  }
  return spec;
}

}  // namespace tetra
