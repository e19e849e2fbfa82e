// Pipeline-parallel schedules as data (docs/architecture.md, principle 4): for a pipeline
// of `stages` ranks, each holding `virtual_stages` model chunks, the ordered
// list of actions one pipeline rank performs in one optimizer step: forward and
// backward of a micro-batch on a chunk (the backward split in two for the
// zero-bubble kinds), and the point-to-point sends and receives of activations
// and gradients between neighbouring virtual stages. An executor runs the
// table; pipeline/schedule_checker.h proves it sound (matched messages, no
// deadlock, bounded memory) before anything runs.
//
// Virtual stages (pipeline/stage_partition.h): the model's V = stages *
// virtual_stages pieces in model order. Chunk c of rank r is virtual stage
// c * stages + r (Megatron-LM's interleaved layout), except for DualPipeV,
// whose two chunks make a V: chunk 0 of rank r is virtual stage r, chunk 1
// virtual stage 2 stages - 1 - r, so rank 0 holds the first and the last
// (the embedding and the LM head) and rank stages - 1 the two middle ones.
// Activations flow from virtual stage s to s + 1, gradients from s + 1 to s;
// between two virtual stages on the same rank (DualPipeV's p - 1 and p, both
// on rank p - 1) there is no message: the forward of chunk 1 reads chunk 0's
// output of the same micro-batch, and the backward of chunk 0 reads chunk
// 1's input gradient, each placed after what it reads in the table.
//
// Split backward (SplitsBackward: ZB-H1 and DualPipeV): each kBackward is B,
// the input gradient only (what the previous stage waits for), and exactly
// one kWeight (W, the weight gradient) of the same micro-batch and chunk
// follows it later on the same rank; W needs the chunk's activations, so
// they stay live until W. In the other kinds kBackward is the whole backward
// and there is no kWeight.
//
// Kinds (p = stages, m = micro-batches, r = pipeline rank; bubbles per rank
// in the cost model below, F, B, W per chunk, B the whole backward = B_in + W):
//   GPipe:       all m forwards, then all m backwards (peak m activations).
//   1F1B:        p - r - 1 warm-up forwards, then one forward / one
//                backward in turn, then the remaining backwards (PipeDream-
//                Flush; peak p - r activations). Bubble (p - 1)(F + B).
//   interleaved: Megatron-LM's interleaved 1F1B over m * v virtual
//                micro-batches: forwards walk the chunks in groups of `stages`
//                micro-batches (chunk 0 for micro-batches 0..p-1, chunk 1 for
//                the same, ..., then micro-batches p..2p-1), backwards the
//                same with the chunks reversed; 2 (p - r - 1) + (v - 1) p
//                warm-up forwards. Bubble (p - 1)(F + B) with chunk times.
//   ZB-H1:       the handcrafted memory-efficient zero-bubble schedule (Qi et
//                al., "Zero Bubble Pipeline Parallelism", 2023, figure 3):
//                1F1B's order of forwards and input gradients (p - r - 1
//                warm-up forwards, then F, B_in in turn, then the remaining
//                B_in's), with the W's postponed: after its j-th B_in a rank
//                runs the oldest pending W when j >= r, and the r W's it still
//                owes after its last B_in at the end. So B_in's travel up the
//                pipeline without W's in their way, and rank r's r postponed
//                W's fill the r units at the end while the last B_in climbs
//                to rank 0. Every rank holds up to min(p, m) micro-batches'
//                activations (1F1B's peak, which is rank 0's; the r postponed
//                W's keep rank r at p too). Bubble (p - 1)(F + B_in - W) =
//                (p - 1)(F + B - 2W) for m >= p: a third of 1F1B's under the
//                cost model below (m < p: schedule_checker.h).
//   DualPipeV:   DeepSeek's DualPipe "cut in half" (the DualPipe repository's
//                dualpipev.py; DeepSeek-V3 report, section 3.2.1), on the V
//                placement, m >= 2p. Rank r runs, with Fc / Bc / Wc the
//                forward, input gradient and weight gradient of chunk c on
//                that chunk's next micro-batch:
//                  1. 2 (p - r - 1) x F0
//                  2. (r + 1) x (F0, F1)
//                  3. (p - r - 1) x (B1, W1, F1)
//                  4. (m - 2p + r + 1) x (F0&B1, W1, F1&B0, W0)
//                  5. (p - r - 1) x (B1, W1, F1&B0, W0)
//                  6. (r + 1) x (B1, B0), the W's of the last r + 1 of these
//                     2 (r + 1) B's postponed
//                  7. (p - r - 1) x (W, B0), this B0's W postponed
//                  8. (r + 1) x W
//                where postponed W's run oldest first where a bare W stands.
//                (Rank p - 1's first F0&B1 of step 4 is not paired, as in
//                dualpipev.py: both its outputs stay on the rank.) Peak 2p + 1
//                micro-batch chunks of activations on every rank (p + 1/2
//                ranks' worth: the DeepSeek-V3 report's PP + 1 stages).
//                Bubble p - 1 units per rank under the cost model below
//                (schedule_checker.h derives it, and says why DeepSeek's
//                (PP/2 - 1)(F&B + B - 3W) is more).
//
// Paired F&B (DualPipeV): DeepSeek overlaps the forward of one micro-batch on
// one chunk with the backward (B_in) of another on the other chunk, so that
// one's communication hides behind the other's computation. A table shows the
// pair as the kForward immediately followed by the kBackward of the other
// chunk, nothing between them (IsPairedForwardBackward): the receives both
// need come before the forward, the sends of both outputs after the
// backward, and the executor may run the two back to back or overlapped. In
// the ideal timeline a pair takes F + B_in and both outputs exist when it ends.
//
// Message order: the sends and receives are placed on every rank in the
// order of the ideal timeline (the cost model below, communication free): a
// message is ordered by the time its producer finishes, then by the sending
// rank, then by the order the sender produced it, and every rank meets its
// messages in that one global order. So under blocking rendezvous semantics
// (a send completes only together with its matching receive) the earliest
// unfinished message can always complete: the tables cannot deadlock,
// whatever the real compute times are. A receive is therefore posted as soon
// as, in the ideal timeline, its data exists, which may be several
// computations before the forward or backward that consumes it.
#ifndef TETRA_PIPELINE_SCHEDULE_H_
#define TETRA_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace tetra {

enum class ScheduleKind { kGPipe, kOneFOneB, kInterleaved, kZeroBubbleH1, kDualPipeV };

// "GPipe", "1F1B", "interleaved 1F1B", "ZB-H1", "DualPipeV".
const char* ScheduleKindName(ScheduleKind kind);

// Whether the kind splits each backward into B (kBackward, input gradient)
// and W (kWeight, weight gradient): ZB-H1 and DualPipeV.
bool SplitsBackward(ScheduleKind kind);

// What a schedule is a function of (besides the pipeline rank).
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int stages = 1;          // pipeline ranks, p
  int micro_batches = 1;   // per optimizer step and data-parallel rank, m
  int virtual_stages = 1;  // model chunks per rank, v
};

// kBackward: the whole backward, or its input-gradient half B where the
// kind SplitsBackward; kWeight: the weight-gradient half W (no peer, no
// message).
enum class ActionType {
  kForward,
  kBackward,
  kSendActivation,
  kRecvActivation,
  kSendGradient,
  kRecvGradient,
  kWeight
};

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

// Forward, backward and weight gradient.
bool IsCompute(ActionType type);

// "forward of micro-batch 3 chunk 0", "weight gradient of micro-batch 3 chunk
// 0", "send activation of micro-batch 3 chunk 0 to rank 2", ...
std::string ActionText(const Action& action);

// Whether `first` and `second`, standing next to each other in a table of
// `kind`, are a paired F&B (see above): DualPipeV, a forward followed by the
// backward of the other chunk.
bool IsPairedForwardBackward(ScheduleKind kind, const Action& first, const Action& second);

// The equal-stage-time cost model, in time units per micro-batch and chunk:
// the usual assumption that a backward costs twice its forward, and, split,
// that its two halves (input and weight gradient) cost the same.
inline constexpr int kForwardTime = 1;
inline constexpr int kBackwardTime = 2;        // the whole backward
inline constexpr int kInputGradientTime = 1;   // B of a split backward
inline constexpr int kWeightGradientTime = 1;  // W
static_assert(kInputGradientTime + kWeightGradientTime == kBackwardTime);
// The time of a computation of `type` in a schedule of `kind`: kBackward is
// kInputGradientTime where the kind SplitsBackward, else kBackwardTime.
int ComputeTime(ScheduleKind kind, ActionType type);

// The virtual stage of `chunk` on pipeline rank `rank`: c * stages + rank,
// or DualPipeV's V (chunk 0: rank, chunk 1: 2 stages - 1 - rank).
int VirtualStage(const ScheduleSpec& spec, int rank, int chunk);

// The pipeline rank that holds virtual stage `stage` (0 <= stage < stages x
// virtual_stages).
int RankOfVirtualStage(const ScheduleSpec& spec, int stage);

// Whether the spec describes a schedule this file can build. Errors are
// UserErrors naming the config fields and the numbers: stages, micro_batches
// and virtual_stages at least 1; GPipe, 1F1B and ZB-H1 with one chunk per
// rank; interleaving with more than one chunk needs stages >= 2 and
// micro_batches a multiple of stages; DualPipeV needs virtual_stages 2,
// stages >= 2 and micro_batches >= 2 stages; stages x virtual_stages x
// micro_batches at most 2^22.
absl::Status ValidateScheduleSpec(const ScheduleSpec& spec);

// The actions of pipeline rank `rank` (0 <= rank < spec.stages) in execution
// order. A pure function of its arguments.
absl::StatusOr<std::vector<Action>> BuildSchedule(const ScheduleSpec& spec, int rank);

// BuildSchedule for every rank, indexed by pipeline rank.
absl::StatusOr<std::vector<std::vector<Action>>> BuildAllSchedules(const ScheduleSpec& spec);

// The spec a config asks for, with `data_parallel` ranks: parallel.schedule
// GPIPE is kGPipe and ZB_H1 kZeroBubbleH1 (both kOneFOneB for one stage,
// which has no bubble), ONE_F_ONE_B is kOneFOneB with virtual_stages 1 and
// kInterleaved above, DUALPIPE_V is kDualPipeV; micro-batches =
// train.global_batch_size / (train.micro_batch_size x data_parallel),
// checked by ValidateScheduleSpec. How the layers split over the stages is
// pipeline/stage_partition.h's.
absl::StatusOr<ScheduleSpec> ScheduleSpecFromConfig(const TrainerConfig& config, int data_parallel);

// The hint for a train.global_batch_size that `data_parallel` ranks cannot
// split into whole micro-batches of train.micro_batch_size (all >= 1): every
// fix, with its numbers: the largest smaller micro-batch size that splits it,
// the next global batch size that does, and the most data-parallel ranks
// below `data_parallel` that would, where they exist. E.g. for 16, 16, 4:
// "set train.micro_batch_size to 4, or train.global_batch_size to a multiple
// of 64 (e.g. 64), or run 1 data-parallel rank instead of 4".
std::string BatchSplitHint(int64_t global_batch_size, int64_t micro_batch_size,
                           int64_t data_parallel);

}  // namespace tetra

#endif  // TETRA_PIPELINE_SCHEDULE_H_
