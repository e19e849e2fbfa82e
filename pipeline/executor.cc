#include "pipeline/executor.h"

#include <algorithm>
#include <utility>

#include "core/logging.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/timer.h"

namespace tetra {

PipelineExecutor::PipelineExecutor(LanguageModel& model, Communicator& pipeline,
                                   std::vector<Action> actions, int64_t batch, int64_t seq)
    : model_(model),
      pipeline_(pipeline),
      actions_(std::move(actions)),
      batch_(batch),
      seq_(seq),
      inputs_(batch * seq),
      targets_(batch * seq) {
  const LayerParallelism& lp = model_.parallelism();
  rows_ = batch * seq / (lp.sequence_parallel ? lp.tp_size() : 1);
  hidden_ = model_.config().hidden_size();
  peers_.resize(model_.num_chunks());
  for (const Action& a : actions_) {
    TETRA_CHECK(a.chunk >= 0 && a.chunk < model_.num_chunks())
        << ActionText(a) << ": the model holds " << model_.num_chunks() << " chunks";
    micro_batches_ = std::max(micro_batches_, a.micro_batch + 1);
    ChunkPeers& peers = peers_[a.chunk];
    switch (a.type) {
      case ActionType::kRecvActivation:
        peers.activation_from = a.peer;
        break;
      case ActionType::kSendActivation:
        peers.activation_to = a.peer;
        break;
      case ActionType::kRecvGradient:
        peers.gradient_from = a.peer;
        break;
      case ActionType::kSendGradient:
        peers.gradient_to = a.peer;
        break;
      case ActionType::kWeight:
        split_backward_ = true;
        break;
      default:
        break;
    }
  }
  int last_gradient = -1;  // the step's last backward (fused) or W
  for (size_t i = 0; i < actions_.size(); ++i) {
    const ActionType type = actions_[i].type;
    if (type == (split_backward_ ? ActionType::kWeight : ActionType::kBackward))
      last_gradient = static_cast<int>(i);
  }
  // The gradient-ready callback promises a suffix of the flat buffers, which
  // the step's last gradient computation can give only on the first chunk;
  // otherwise every gradient is announced ready once the table has run.
  if (last_gradient >= 0 && actions_[last_gradient].chunk == 0) ready_action_ = last_gradient;
}

size_t PipelineExecutor::Piece(const Action& a) const {
  return static_cast<size_t>(a.chunk) * micro_batches_ + a.micro_batch;
}

Tensor PipelineExecutor::AcquireBuffer() {
  ReapSends(/*all=*/false);
  if (free_buffers_.empty()) {
    ++buffers_made_;
    const Placement& placement = CurrentPlacement();
    return Tensor::Empty({rows_, hidden_}, placement.compute, placement.device);
  }
  Tensor buffer = std::move(free_buffers_.back());
  free_buffers_.pop_back();
  return buffer;
}

void PipelineExecutor::ReleaseBuffer(Tensor buffer) {
  if (buffer.defined()) free_buffers_.push_back(std::move(buffer));
}

Tensor PipelineExecutor::CopyToBuffer(const Tensor& data) {
  Tensor buffer = AcquireBuffer();
  TETRA_CHECK(data.numel() == buffer.numel())
      << "pipeline message of shape " << ShapeString(data.shape()) << ", expected (" << rows_
      << ", " << hidden_ << ")";
  buffer.CopyFrom(data);
  return buffer;
}

void PipelineExecutor::Send(Tensor buffer, int peer) {
  CommHandle handle = pipeline_.SendAsync(buffer, peer);
  sends_.push_back({std::move(buffer), std::move(handle)});
}

void PipelineExecutor::ReapSends(bool all) {
  size_t pending = 0;
  for (size_t i = 0; i < sends_.size(); ++i) {
    PendingSend& send = sends_[i];
    if (all) {
      Wait(send.handle);
    } else if (!send.handle.Test()) {
      if (pending != i) sends_[pending] = std::move(send);
      ++pending;
      continue;
    }
    ReleaseBuffer(std::move(send.buffer));
  }
  sends_.resize(pending);
}

void PipelineExecutor::Load(const LoadMicroBatch& load, int micro_batch, absl::Status* status) {
  absl::Status loaded = load(micro_batch, inputs_.data(), targets_.data());
  if (loaded.ok()) return;
  // The table goes on with token 0 everywhere, so every rank's messages
  // still match and nothing waits; the step then fails with the first error.
  std::fill(inputs_.begin(), inputs_.end(), 0);
  std::fill(targets_.begin(), targets_.end(), 0);
  if (status->ok()) *status = std::move(loaded);
}

void PipelineExecutor::Wait(CommHandle& handle) {
  Timer timer;
  const ScopedSpan span(SpanKind::kCommPp, "pipeline wait pp");
  handle.Wait();
  wait_seconds_ += timer.Seconds();
}

absl::StatusOr<double> PipelineExecutor::Step(
    const LoadMicroBatch& load, float grad_scale,
    const LanguageModel::GradientReadyCallback& on_ready) {
  Timer step_timer;
  wait_seconds_ = 0;
  executed_.clear();
  // Per (micro-batch, chunk): the received input or output gradient with its
  // pending receive (and the table's action that posted it), and its
  // activation slot.
  struct InFlight {
    Tensor received;
    CommHandle receive;
    Action receive_action;
    int slot = -1;
  };
  std::vector<InFlight> in_flight(static_cast<size_t>(micro_batches_) * model_.num_chunks());
  std::vector<bool> slot_busy;
  // Pool buffers holding what a forward or backward sends, by piece; and
  // what one hands to a chunk of this same rank (DualPipeV's turn of the V),
  // by micro-batch: its activation and its gradient.
  std::vector<Tensor> outputs(in_flight.size());
  std::vector<Tensor> local_activation(micro_batches_), local_gradient(micro_batches_);
  // The input a computation reads: received (after waiting for it, recorded
  // where it waited) or handed over on this rank.
  auto take_input = [&](const Action& a, InFlight& mb, bool receives, std::vector<Tensor>& local) {
    if (!receives) {
      TETRA_CHECK(local[a.micro_batch].defined())
          << ActionText(a) << " before the chunk that feeds it on this rank";
      mb.received = std::move(local[a.micro_batch]);
      local[a.micro_batch] = Tensor();
      return;
    }
    Wait(mb.receive);
    executed_.push_back(mb.receive_action);
  };
  // Where a computation's result goes: a send's buffer, or this rank's next chunk.
  auto hand_on = [&](const Action& a, const Tensor& result, bool sends,
                     std::vector<Tensor>& local) {
    (sends ? outputs[Piece(a)] : local[a.micro_batch]) = CopyToBuffer(result);
  };
  int live_activations = 0;
  auto release_slot = [&](InFlight& mb) {
    slot_busy[mb.slot] = false;
    --live_activations;
  };
  double loss_sum = 0;
  peak_activations_ = 0;
  absl::Status status;

  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    InFlight& mb = in_flight[Piece(a)];
    const PipelineStage& stage = model_.chunk(a.chunk);
    switch (a.type) {
      case ActionType::kRecvActivation:
      case ActionType::kRecvGradient:
        mb.received = AcquireBuffer();
        mb.receive_action = a;
        mb.receive = pipeline_.RecvAsync(mb.received, a.peer);
        break;
      case ActionType::kSendActivation:
      case ActionType::kSendGradient: {
        Tensor& out = outputs[Piece(a)];
        TETRA_CHECK(out.defined()) << ActionText(a) << " before its computation";
        Send(std::move(out), a.peer);
        executed_.push_back(a);
        out = Tensor();
        break;
      }
      case ActionType::kForward: {
        const auto free_slot = std::find(slot_busy.begin(), slot_busy.end(), false);
        mb.slot = static_cast<int>(free_slot - slot_busy.begin());
        if (free_slot == slot_busy.end())
          slot_busy.push_back(true);
        else
          *free_slot = true;
        peak_activations_ = std::max(peak_activations_, ++live_activations);
        if (stage.has_embedding || stage.has_head) Load(load, a.micro_batch, &status);
        if (!stage.has_embedding) {
          take_input(a, mb, peers_[a.chunk].activation_from >= 0, local_activation);
        }
        executed_.push_back(a);
        double stage_loss = 0;
        const ScopedSpan span(SpanKind::kForward, nullptr, a.micro_batch);
        const Tensor out =
            model_.ForwardStage(mb.slot, a.chunk, inputs_.data(), mb.received, targets_.data(),
                                batch_, seq_, grad_scale, &stage_loss);
        // The output lives in the slot until its next forward: the send takes a copy.
        if (!stage.has_head) hand_on(a, out, peers_[a.chunk].activation_to >= 0, local_activation);
        ReleaseBuffer(std::move(mb.received));
        mb.received = Tensor();
        loss_sum += stage_loss;
        break;
      }
      case ActionType::kBackward: {
        if (!stage.has_head) take_input(a, mb, peers_[a.chunk].gradient_from >= 0, local_gradient);
        executed_.push_back(a);
        const ScopedSpan span(SpanKind::kBackward, nullptr, a.micro_batch);
        const Tensor d_input =
            split_backward_
                ? model_.BackwardInputStage(mb.slot, a.chunk, mb.received)
                : model_.BackwardStage(mb.slot, a.chunk, mb.received,
                                       static_cast<int>(i) == ready_action_ ? on_ready : nullptr);
        // d input lives in the model until its next backward: the send takes a copy.
        if (!stage.has_embedding)
          hand_on(a, d_input, peers_[a.chunk].gradient_to >= 0, local_gradient);
        ReleaseBuffer(std::move(mb.received));
        mb.received = Tensor();
        if (!split_backward_) release_slot(mb);
        break;
      }
      case ActionType::kWeight: {
        executed_.push_back(a);
        const ScopedSpan span(SpanKind::kBackward, "weight gradients", a.micro_batch);
        model_.BackwardWeightStage(mb.slot, a.chunk,
                                   static_cast<int>(i) == ready_action_ ? on_ready : nullptr);
        release_slot(mb);
        break;
      }
    }
  }
  if (ready_action_ < 0 && on_ready) on_ready(0);
  ReapSends(/*all=*/true);
  step_seconds_ = step_timer.Seconds();
  RETURN_IF_ERROR(status);
  return loss_sum;
}

absl::StatusOr<double> PipelineExecutor::EvaluateLoss(const LoadMicroBatch& load,
                                                      int micro_batches) {
  double loss_sum = 0;
  absl::Status status;
  Tensor handed;  // a chunk's output for this rank's next chunk (DualPipeV's turn of the V)
  for (int m = 0; m < micro_batches; ++m) {
    // Each chunk's input comes from, and its output goes to, the ranks the
    // training table moves its activations between (none: this rank's other chunk).
    for (int c = 0; c < model_.num_chunks(); ++c) {
      const PipelineStage& stage = model_.chunk(c);
      if (stage.has_embedding || stage.has_head) Load(load, m, &status);
      Tensor hidden;
      if (!stage.has_embedding && peers_[c].activation_from >= 0) {
        hidden = AcquireBuffer();
        pipeline_.Recv(hidden, peers_[c].activation_from);
      } else if (!stage.has_embedding) {
        TETRA_CHECK(handed.defined())
            << "chunk " << c
            << " has no input: no rank sends it one, nor this rank's chunk before it";
        hidden = std::move(handed);
        handed = Tensor();
      }
      double loss = 0;
      const Tensor out =
          model_.EvaluateStage(0, c, inputs_.data(), hidden, targets_.data(), batch_, seq_, &loss);
      ReleaseBuffer(std::move(hidden));
      loss_sum += loss;
      if (stage.has_head) continue;
      if (peers_[c].activation_to >= 0) {
        Send(CopyToBuffer(out), peers_[c].activation_to);
      } else {
        handed = CopyToBuffer(out);
      }
    }
  }
  ReapSends(/*all=*/true);
  RETURN_IF_ERROR(status);
  return loss_sum;
}

}  // namespace tetra
