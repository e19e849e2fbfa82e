// The schedule checker: simulates every rank of a pipeline's tables
// (pipeline/schedule.h) together, before anything runs, and proves
//   - each table is well formed: every (micro-batch, chunk) runs its forward
//     and its backward exactly once, the forward first; a forward after its
//     activation is received and a backward after its gradient is received
//     (except at the first and last virtual stage); a send after the
//     computation that produces it; peers are the neighbouring virtual stages;
//   - every send has exactly one matching receive and every receive one send;
//   - no deadlock under blocking rendezvous semantics: a send and its receive
//     complete together, once both ranks have reached them, and a rank does
//     nothing else meanwhile (the strictest model: tables that pass it also
//     run with buffered or non-blocking sends);
//   - peak live activations (forwards whose backward has not run, counted in
//     micro-batch chunks) stay within the kind's bound (ActivationBound);
// and measures the bubble in the equal-stage-time model (SimulateTimeline).
#ifndef TETRA_PIPELINE_SCHEDULE_CHECKER_H_
#define TETRA_PIPELINE_SCHEDULE_CHECKER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"

namespace tetra {

// A forward or backward placed in the simulated timeline, [start, end) in
// time units.
struct TimedAction {
  Action action;
  int start = 0;
  int end = 0;
};

struct RankReport {
  std::vector<TimedAction> timeline;  // the rank's computations, in table order
  int busy_time = 0;
  int idle_time = 0;  // step_time - busy_time
  // Most micro-batch chunks forwarded and not yet backwarded at once, in all
  // and per chunk (with one chunk per rank, micro-batches).
  int peak_activations = 0;
  std::vector<int> peak_activations_per_chunk;
};

struct ScheduleReport {
  int step_time = 0;
  std::vector<RankReport> ranks;  // by pipeline rank

  // Idle time over step time, the largest over ranks.
  double BubbleFraction() const;
};

// The textbook bubble with equal stage times: (p - 1) / (v m + p - 1), which is
// (p - 1) / (m + p - 1) for GPipe and 1F1B (v = 1).
double IdealBubbleFraction(const ScheduleSpec& spec);

// The most live activations (micro-batch chunks) the checker allows on
// `rank`: GPipe m; 1F1B stages - rank; interleaved Megatron-LM's warm-up
// 2 (stages - rank - 1) + (v - 1) stages, plus the one in flight.
int ActivationBound(const ScheduleSpec& spec, int rank);

// The equal-stage-time timeline of `orders`, orders[r] being what pipeline
// rank r does, in order: a forward takes kForwardTime and a backward
// kBackwardTime per chunk, a send makes its data exist at the rank's clock
// (communication is free and never waits), a receive waits until its data
// exists. The step time is when the last rank finishes; a rank's idle time is
// the step time less its computations. Given the tables (CheckSchedule), a
// receive stands where the table posts it; given what executors did
// (PipelineExecutor::executed()), where the rank waited for it, so the
// result is the executor's bubble under the model, whatever the machine's
// load. Fills step_time and each rank's timeline, busy and idle time and
// peaks. Errors (InvalidArgument): an action outside the spec's micro-batches
// or chunks, a message to or from no virtual stage, or ranks that stall on a
// receive whose data never comes, naming them.
absl::StatusOr<ScheduleReport> SimulateTimeline(const ScheduleSpec& spec,
                                                const std::vector<std::vector<Action>>& orders);

// Checks the tables of every pipeline rank (tables[r] for rank r) against
// `spec`; the first violation is an InvalidArgument error naming the rank,
// the action's index and the action.
absl::StatusOr<ScheduleReport> CheckSchedule(const ScheduleSpec& spec,
                                             const std::vector<std::vector<Action>>& tables);

// The entry point for an executor (DESIGN.md, principle 4): the table of
// pipeline rank `pp_rank` for the config's schedule with `data_parallel`
// ranks, after the tables of every rank have passed CheckSchedule (a table
// that fails is a bug, checked). Without pipeline parallelism this is the
// one-stage table: each micro-batch's forward, then its backward.
absl::StatusOr<std::vector<Action>> MakeSchedule(const TrainerConfig& config, int data_parallel, int pp_rank);

}  // namespace tetra

#endif  // TETRA_PIPELINE_SCHEDULE_CHECKER_H_
