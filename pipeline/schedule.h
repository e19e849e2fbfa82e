// Pipeline-parallel schedules as data (DESIGN.md, principle 4): for a pipeline
// of `stages` ranks, each holding `virtual_stages` model chunks, the ordered
// list of actions one pipeline rank performs in one optimizer step: forward and
// backward of a micro-batch on a chunk, and the point-to-point sends and
// receives of activations and gradients between neighbouring virtual stages.
// An executor runs the table; pipeline/schedule_checker.h proves it sound
// (matched messages, no deadlock, bounded memory) before anything runs.
//
// Virtual stages: chunk c of rank r is virtual stage c * stages + r, so the
// model's V = stages * virtual_stages pieces run rank 0, 1, ..., stages - 1,
// then back on rank 0 with chunk 1 (Megatron-LM's interleaved layout).
// Activations flow from virtual stage s to s + 1, gradients from s + 1 to s.
//
// Kinds:
//   GPipe:       all m forwards, then all m backwards (peak m activations).
//   1F1B:        stages - rank - 1 warm-up forwards, then one forward / one
//                backward in turn, then the remaining backwards (PipeDream-
//                Flush; peak stages - rank activations).
//   interleaved: Megatron-LM's interleaved 1F1B over m * v virtual
//                micro-batches: forwards walk the chunks in groups of `stages`
//                micro-batches (chunk 0 for micro-batches 0..p-1, chunk 1 for
//                the same, ..., then micro-batches p..2p-1), backwards the
//                same with the chunks reversed; 2 (stages - rank - 1) +
//                (v - 1) stages warm-up forwards.
//
// Message order: the sends and receives are placed on every rank in the
// order of the ideal timeline (forward 1 time unit, backward 2, communication
// free): a message is ordered by the time its producer finishes, then by the
// sending rank, and every rank meets its messages in that one global order.
// So under blocking rendezvous semantics (a send completes only together with
// its matching receive) the earliest unfinished message can always complete:
// the tables cannot deadlock, whatever the real compute times are. A receive
// is therefore posted as soon as, in the ideal timeline, its data exists, which
// may be several computations before the forward or backward that consumes it.
#ifndef TETRA_PIPELINE_SCHEDULE_H_
#define TETRA_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace tetra {

enum class ScheduleKind { kGPipe, kOneFOneB, kInterleaved };

// "GPipe", "1F1B", "interleaved 1F1B".
const char* ScheduleKindName(ScheduleKind kind);

// What a schedule is a function of (besides the pipeline rank).
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int stages = 1;          // pipeline ranks, p
  int micro_batches = 1;   // per optimizer step and data-parallel rank, m
  int virtual_stages = 1;  // model chunks per rank, v
};

enum class ActionType { kForward, kBackward, kSendActivation, kRecvActivation, kSendGradient, kRecvGradient };

struct Action {
  ActionType type = ActionType::kForward;
  int micro_batch = 0;
  // The local chunk that computes, or whose input or output the message moves
  // (a received activation is the input of this chunk's forward).
  int chunk = 0;
  // Sends and receives: the other pipeline rank (0 .. stages - 1, a position
  // in the pipeline group, not a global rank); -1 for compute.
  int peer = -1;

  bool operator==(const Action&) const = default;
};

bool IsCompute(ActionType type);

// "F3", "B3" (chunk 0), "F3 chunk 1", "send activation 3 chunk 0 to rank 2", ...
std::string ActionText(const Action& action);

// The equal-stage-time cost model, in time units per micro-batch and chunk:
// the usual assumption that a backward costs twice its forward.
inline constexpr int kForwardTime = 1;
inline constexpr int kBackwardTime = 2;
int ComputeTime(ActionType type);

// c * stages + rank.
int VirtualStage(const ScheduleSpec& spec, int rank, int chunk);

// Whether the spec describes a schedule this file can build. Errors are
// UserErrors naming the config fields and the numbers: stages, micro_batches
// and virtual_stages at least 1; GPipe and 1F1B with one chunk per rank;
// interleaving with more than one chunk needs stages >= 2 and micro_batches a
// multiple of stages; stages x virtual_stages x micro_batches at most 2^22.
absl::Status ValidateScheduleSpec(const ScheduleSpec& spec);

// The actions of pipeline rank `rank` (0 <= rank < spec.stages) in execution
// order. A pure function of its arguments.
absl::StatusOr<std::vector<Action>> BuildSchedule(const ScheduleSpec& spec, int rank);

// BuildSchedule for every rank, indexed by pipeline rank.
absl::StatusOr<std::vector<std::vector<Action>>> BuildAllSchedules(const ScheduleSpec& spec);

// The spec a config asks for, with `data_parallel` ranks: parallel.schedule
// GPIPE is kGPipe (kOneFOneB for one stage), ONE_F_ONE_B is kOneFOneB with
// virtual_stages 1 and kInterleaved above; micro-batches = train.global_batch_size /
// (train.micro_batch_size x data_parallel). Besides ValidateScheduleSpec,
// interleaving needs model.num_hidden_layers to be a multiple of pipeline x
// virtual_stages (checked when parallel.pipeline_layers does not set the
// split explicitly).
absl::StatusOr<ScheduleSpec> ScheduleSpecFromConfig(const TrainerConfig& config, int data_parallel);

// The hint for a train.global_batch_size that `data_parallel` ranks cannot
// split into whole micro-batches of train.micro_batch_size (all >= 1): every
// fix, with its numbers: the largest smaller micro-batch size that splits it,
// the next global batch size that does, and the most data-parallel ranks
// below `data_parallel` that would, where they exist. E.g. for 16, 16, 4:
// "set train.micro_batch_size to 4, or train.global_batch_size to a multiple
// of 64 (e.g. 64), or run 1 data-parallel rank instead of 4".
std::string BatchSplitHint(int64_t global_batch_size, int64_t micro_batch_size, int64_t data_parallel);

}  // namespace tetra

#endif  // TETRA_PIPELINE_SCHEDULE_H_
