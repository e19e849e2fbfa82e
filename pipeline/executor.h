// The pipeline executor: runs one pipeline rank's action table
// (pipeline/schedule.h) for one optimizer step on its model chunks, moving
// activations (forward) and their gradients (backward) between neighbouring
// pipeline ranks with non-blocking point-to-point messages. Every step runs
// here, as Megatron-Core's get_forward_backward_func returns a schedule for
// every layout: without pipeline parallelism the table is the one-stage
// schedule (each micro-batch's forward, then its backward) and no message moves.
//
// A rank holds one model chunk, or with interleaving several: the model's
// chunks are the rank's chunks of the table. Receives are posted where the table
// places them and waited on just before the computation that reads them;
// sends are waited on at the latest at the end of the step. The table's
// message order is deadlock-free under blocking semantics, so the looser
// non-blocking order is too. Messages carry no tags, as NCCL has none: the
// checker proves each pair of ranks meets its messages in the same order
// (rendezvous matching), so posting them in table order matches them. Each (micro-batch, chunk)
// takes a model activation slot as its forward starts and gives it back after its backward, so a
// schedule holds as many slots as it keeps forwards in flight. In the zero-bubble schedules (ZB-H1,
// DualPipeV) a backward is its input-gradient half B (LanguageModel::BackwardInputStage) and the
// table's later W runs the weight gradients it kept (BackwardWeightStage): the slot is given back
// after W. A forward or backward whose table posts no receive (DualPipeV's
// turn of the V, two neighbouring virtual stages on one rank) reads what the
// other chunk of this rank handed over, with no message. Messages
// travel in the activations' dtype, on their device, through a pool of
// buffers reused across micro-batches and steps.
//
// Each Step also records what it did, in order (executed()), so a test can
// replay it under the schedule checker's cost model (SimulateTimeline in
// pipeline/schedule_checker.h) and get the bubble the table promises, which
// no load on the machine can change, unlike the measured wait_seconds().
#ifndef TETRA_PIPELINE_EXECUTOR_H_
#define TETRA_PIPELINE_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "model/language_model.h"
#include "pipeline/schedule.h"

namespace tetra {

class PipelineExecutor {
 public:
  // Fills inputs and targets, each (batch, seq) token ids, of micro-batch m.
  // An error (bad data) fails the step on the ranks that loaded it, once its
  // table has run to the end (with token 0 in place of the micro-batch), so
  // no pipeline peer is left waiting for a message; the caller tells the
  // other ranks (TrainStep agrees on the status over the world).
  using LoadMicroBatch =
      std::function<absl::Status(int micro_batch, int32_t* inputs, int32_t* targets)>;

  // `model` holds this rank's chunks, `pipeline` is the pipeline group
  // (the table's peers are its ranks) and `actions` this rank's table of a
  // training step (MakeSchedule). All must outlive the executor.
  PipelineExecutor(LanguageModel& model, Communicator& pipeline, std::vector<Action> actions,
                   int64_t batch, int64_t seq);

  // Runs the table once: accumulates into the model's gradients the gradient
  // of grad_scale x the step's loss sum, calling on_ready during the step's
  // last gradient computation (its last backward, or W where the schedule
  // splits them) when that runs chunk 0, else once with 0 after it. Returns
  // the sum of the token cross-entropies of every micro-batch on the rank
  // holding the LM head (the last stage's; DualPipeV's rank 0), 0 on the others.
  absl::StatusOr<double> Step(const LoadMicroBatch& load, float grad_scale,
                              const LanguageModel::GradientReadyCallback& on_ready = nullptr);

  // Evaluation: the sum of the token cross-entropies of micro-batches
  // 0 .. micro_batches - 1, forward only, each passed through every virtual
  // stage in model order before the next starts. The sum on the rank holding
  // the head, 0 on the others.
  absl::StatusOr<double> EvaluateLoss(const LoadMicroBatch& load, int micro_batches);

  // Seconds the last Step waited on pipeline messages (the bubble, plus any
  // transfer time not hidden), and the step's wall time.
  double wait_seconds() const { return wait_seconds_; }
  double step_seconds() const { return step_seconds_; }
  // Most (micro-batch, chunk) forwards that had run but not yet their
  // backward (activations held) at any point of the last Step.
  int peak_activations() const { return peak_activations_; }
  // What the last Step did, in order: each computation as it ran, each send
  // where it was posted (its data exists from then on) and each receive
  // where the rank waited for its data (not where it was posted). Waits on
  // sends are left out: the cost model's sends never wait.
  const std::vector<Action>& executed() const { return executed_; }
  // Message buffers made so far: a pool, not one per micro-batch.
  int message_buffers() const { return buffers_made_; }

 private:
  // A (rows, C) buffer in the activations' dtype and device, from the pool.
  Tensor AcquireBuffer();
  void ReleaseBuffer(Tensor buffer);
  // A pool buffer holding `data` (rows, C), which the model may overwrite.
  Tensor CopyToBuffer(const Tensor& data);
  // Sends a pool buffer; it returns to the pool once the send completes.
  void Send(Tensor buffer, int peer);
  // Loads micro-batch m into inputs_ and targets_, or on error token 0 and
  // the first error in *status.
  void Load(const LoadMicroBatch& load, int micro_batch, absl::Status* status);
  // chunk x micro-batches + micro-batch: a (micro-batch, chunk) of the table.
  size_t Piece(const Action& a) const;
  // Returns the buffers of completed sends to the pool; with `all`, waits for every send.
  void ReapSends(bool all);
  void Wait(CommHandle& handle);

  // One (micro-batch, chunk) of a step: the received input or output
  // gradient with its pending receive (and the table's action that posted
  // it), and its activation slot.
  struct InFlight {
    Tensor received;
    CommHandle receive;
    Action receive_action;
    int slot = -1;
  };
  // What one Step holds while its table runs.
  struct StepState {
    StepState(const LoadMicroBatch& load, float grad_scale,
              const LanguageModel::GradientReadyCallback& on_ready, size_t pieces,
              int micro_batches)
        : load(load),
          grad_scale(grad_scale),
          on_ready(on_ready),
          in_flight(pieces),
          outputs(pieces),
          local_activation(micro_batches),
          local_gradient(micro_batches) {}
    const LoadMicroBatch& load;
    float grad_scale;
    const LanguageModel::GradientReadyCallback& on_ready;
    std::vector<InFlight> in_flight;  // by Piece
    std::vector<bool> slot_busy;      // by activation slot
    // Pool buffers holding what a forward or backward sends, by piece; and
    // what one hands to a chunk of this same rank (DualPipeV's turn of the
    // V), by micro-batch: its activation and its gradient.
    std::vector<Tensor> outputs, local_activation, local_gradient;
    int live_activations = 0;
    double loss_sum = 0;
    absl::Status status;  // the first micro-batch that failed to load
  };
  // The table's actions, one method each; `ready`: this is the step's last
  // gradient computation, which calls on_ready.
  void PostReceive(StepState& s, const Action& a);
  void PostSend(StepState& s, const Action& a);
  void Forward(StepState& s, const Action& a);
  void Backward(StepState& s, const Action& a, bool ready);
  void Weight(StepState& s, const Action& a, bool ready);
  // The input a computation reads: received (after waiting for it, recorded
  // where it waited) or, where `received` is false, handed over on this rank.
  void TakeInput(const Action& a, InFlight& piece, bool received, std::vector<Tensor>& local);
  // Where a computation's result goes: a send's buffer, or this rank's next chunk.
  void HandOn(StepState& s, const Action& a, const Tensor& result, bool sent,
              std::vector<Tensor>& local);
  int TakeSlot(StepState& s);
  void ReleaseSlot(StepState& s, InFlight& piece);

  LanguageModel& model_;
  Communicator& pipeline_;
  std::vector<Action> actions_;
  int64_t batch_, seq_, rows_, hidden_;
  int micro_batches_ = 0;
  // Index in actions_ of the step's last gradient computation (a fused
  // backward or a W) when it runs chunk 0, which then calls on_ready; -1:
  // on_ready(0) once the table has run.
  int ready_action_ = -1;
  // Whether the table splits its backwards (has W's: B, then W later).
  bool split_backward_ = false;
  // By chunk: the pipeline ranks its activations and gradients come from and
  // go to, as the table's messages say (the same for every micro-batch); -1:
  // none (the embedding, the head, or this rank's other chunk, which hands
  // them over with no message: DualPipeV's turn of the V).
  struct ChunkPeers {
    int activation_from = -1, activation_to = -1, gradient_from = -1, gradient_to = -1;
  };
  std::vector<ChunkPeers> peers_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<Tensor> free_buffers_;
  // A pending send keeps its buffer; the handle (declared last, destroyed
  // first) waits for the send before the buffer can go.
  struct PendingSend {
    Tensor buffer;
    CommHandle handle;
  };
  std::vector<PendingSend> sends_;
  int buffers_made_ = 0;
  double wait_seconds_ = 0, step_seconds_ = 0;
  int peak_activations_ = 0;
  std::vector<Action> executed_;
};

}  // namespace tetra

#endif  // TETRA_PIPELINE_EXECUTOR_H_
