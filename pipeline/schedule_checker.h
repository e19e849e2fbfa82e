// The schedule checker: simulates every rank of a pipeline's tables
// (pipeline/schedule.h) together, before anything runs, and proves
//   - each table is well formed: every (micro-batch, chunk) runs its forward
//     and its backward exactly once, the forward first, and, where the kind
//     splits backwards, its weight gradient exactly once after its backward
//     (and nowhere else); a forward after its activation is received and a
//     backward after its gradient is received (except at the first and last
//     virtual stage), or, where the neighbouring virtual stage is on the same
//     rank (DualPipeV's middle), after that chunk's forward or backward of
//     the same micro-batch, with no message; a send after the computation
//     that produces it; peers are the ranks of the neighbouring virtual
//     stages;
//   - every send has exactly one matching receive and every receive one send;
//   - no deadlock under blocking rendezvous semantics: a send and its receive
//     complete together, once both ranks have reached them, and a rank does
//     nothing else meanwhile (the strictest model: tables that pass it also
//     run with buffered or non-blocking sends);
//   - peak live activations (forwards whose backward, or weight gradient
//     where backwards split, has not run, counted in micro-batch chunks)
//     stay within the kind's bound (ActivationBound);
// and measures the bubble in the equal-stage-time model (SimulateTimeline).
#ifndef TETRA_PIPELINE_SCHEDULE_CHECKER_H_
#define TETRA_PIPELINE_SCHEDULE_CHECKER_H_

#include <string>
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
  // Most micro-batch chunks forwarded and not yet backwarded (not yet
  // through their weight gradient, where backwards split) at once, in all
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

// The bubble (idle time over step time, the same on every rank) of the
// kind's tables in the equal-stage-time cost model of pipeline/schedule.h
// (F = 1, whole B = 2; split: B_in = 1, W = 1), p stages, m micro-batches,
// v chunks per rank:
//   GPipe, 1F1B, interleaved: the textbook (p - 1) / (v m + p - 1): each rank
//     idles (p - 1)(F + B) per chunk, v m (F + B) busy.
//   ZB-H1, m >= p: (p - 1) / (3m + p - 1). Rank 0 runs its forwards of
//     micro-batches 0..p-1 in [0, p); its first B_in can start only once
//     micro-batch 0 has gone down the p ranks (by p) and its input gradient
//     back up (1 unit a rank, without W's in the way: by 2p - 1). That is
//     p - 1 idle units, (p - 1)(F + B_in - W) = (p - 1)(F + B - 2W), a third
//     of 1F1B's (p - 1)(F + B); after it, one F, B_in and W every 3 units
//     reach rank 0 as in 1F1B's steady state and it never waits again, so
//     the step is 3m + p - 1, of which every rank is busy 3m.
//   ZB-H1, m < p: too few W's to fill the cool-down. Rank p - 1 runs F_k,
//     B_k in turn from p - 1 on, its last B_in ending at p + 2m - 1; that
//     B_in climbs p - 1 ranks, and rank 0, which postpones no W, ends with
//     its W: step 2m + 2p - 1, bubble (2p - m - 1) / (2m + 2p - 1).
//   DualPipeV (m >= 2p): (p - 1) / (6m + p - 1). Rank p - 1, the V's
//     middle, gets micro-batch 0's activation at p - 1 and from then on
//     never waits (its chunk 1 feeds on its own chunk 0, and the pairs keep
//     the other ranks ahead of it), so its 2m (F + B_in + W) = 6m units end
//     the step at 6m + p - 1, and every rank, busy 6m of it, idles p - 1.
//     DeepSeek's (PP/2 - 1)(F&B + B - 3W) per rank (DualPipe README, PP =
//     2p stages; F&B = F + B = 3, B = 2, W = 1 here) is 2 (p - 1): dualpipev.py
//     sends the input gradient of a backward it does not split (steps 4 to 6)
//     after the whole backward, weight gradient included; tetra's tables send
//     it when B_in ends, which saves the other p - 1 units. (The same orders
//     with those gradients held back until their W do give 2 (p - 1) for
//     p = 2..8.)
double IdealBubbleFraction(const ScheduleSpec& spec);

// The formula IdealBubbleFraction evaluates for `spec`, as text:
// "(p-1)/(m+p-1)", "(p-1)/(v*m+p-1)", "(p-1)/(3*m+p-1)", ...
std::string IdealBubbleFormula(const ScheduleSpec& spec);

// The most live activations (micro-batch chunks) the checker allows on
// `rank`: GPipe m; 1F1B stages - rank; interleaved Megatron-LM's warm-up
// 2 (stages - rank - 1) + (v - 1) stages, plus the one in flight; ZB-H1
// stages on every rank (rank r's p - r - 1 warm-up forwards, the one in
// flight and the r micro-batches whose W it postpones: 1F1B's peak, which is
// rank 0's); DualPipeV 2 stages + 1 on every rank (steps 1 and 2 forward
// 2 (p - r - 1) + 2 (r + 1) = 2p chunks, step 3 keeps them at 2p (each W1
// before its F1), each forward of step 4 brings the (2p + 1)-th and the W
// after the next B frees one, and steps 5 to 8 free more than they forward:
// DeepSeek's PP + 1 stages, PP = 2p, in chunks of half a rank's layers).
int ActivationBound(const ScheduleSpec& spec, int rank);

// The equal-stage-time timeline of `orders`, orders[r] being what pipeline
// rank r does, in order: a computation takes its ComputeTime (kForwardTime,
// kBackwardTime, or split kInputGradientTime and kWeightGradientTime) per
// chunk, a send makes its data exist at the rank's clock
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

// The entry point for an executor (docs/architecture.md, principle 4): the table of
// pipeline rank `pp_rank` for the config's schedule with `data_parallel`
// ranks, after the tables of every rank have passed CheckSchedule (a table
// that fails is a bug, checked). Without pipeline parallelism this is the
// one-stage table: each micro-batch's forward, then its backward.
absl::StatusOr<std::vector<Action>> MakeSchedule(const TrainerConfig& config, int data_parallel,
                                                 int pp_rank);

}  // namespace tetra

#endif  // TETRA_PIPELINE_SCHEDULE_CHECKER_H_
