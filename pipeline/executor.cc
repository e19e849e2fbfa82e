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
  peak_activations_ = 0;
  executed_.clear();
  StepState s(load, grad_scale, on_ready, static_cast<size_t>(micro_batches_) * model_.num_chunks(),
              micro_batches_);
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    const bool ready = static_cast<int>(i) == ready_action_;
    switch (a.type) {
      case ActionType::kRecvActivation:
      case ActionType::kRecvGradient:
        PostReceive(s, a);
        break;
      case ActionType::kSendActivation:
      case ActionType::kSendGradient:
        PostSend(s, a);
        break;
      case ActionType::kForward:
        Forward(s, a);
        break;
      case ActionType::kBackward:
        Backward(s, a, ready);
        break;
      case ActionType::kWeight:
        Weight(s, a, ready);
        break;
    }
  }
  if (ready_action_ < 0 && on_ready) on_ready(0);
  ReapSends(/*all=*/true);
  step_seconds_ = step_timer.Seconds();
  RETURN_IF_ERROR(s.status);
  return s.loss_sum;
}

void PipelineExecutor::PostReceive(StepState& s, const Action& a) {
  InFlight& piece = s.in_flight[Piece(a)];
  piece.received = AcquireBuffer();
  piece.receive_action = a;
  piece.receive = pipeline_.RecvAsync(piece.received, a.peer);
}

void PipelineExecutor::PostSend(StepState& s, const Action& a) {
  Tensor& out = s.outputs[Piece(a)];
  TETRA_CHECK(out.defined()) << ActionText(a) << " before its computation";
  Send(std::move(out), a.peer);
  executed_.push_back(a);
  out = Tensor();
}

void PipelineExecutor::Forward(StepState& s, const Action& a) {
  InFlight& piece = s.in_flight[Piece(a)];
  const PipelineStage& stage = model_.chunk(a.chunk);
  piece.slot = TakeSlot(s);
  if (stage.has_embedding || stage.has_head) Load(s.load, a.micro_batch, &s.status);
  if (!stage.has_embedding) {
    TakeInput(a, piece, peers_[a.chunk].activation_from >= 0, s.local_activation);
  }
  executed_.push_back(a);
  double stage_loss = 0;
  const ScopedSpan span(SpanKind::kForward, nullptr, a.micro_batch);
  const Tensor out = model_.ForwardStage(piece.slot, a.chunk, inputs_.data(), piece.received,
                                         targets_.data(), batch_, seq_, s.grad_scale, &stage_loss);
  // The output lives in the slot until its next forward: the send takes a copy.
  if (!stage.has_head) {
    HandOn(s, a, out, peers_[a.chunk].activation_to >= 0, s.local_activation);
  }
  ReleaseBuffer(std::move(piece.received));
  piece.received = Tensor();
  s.loss_sum += stage_loss;
}

void PipelineExecutor::Backward(StepState& s, const Action& a, bool ready) {
  InFlight& piece = s.in_flight[Piece(a)];
  const PipelineStage& stage = model_.chunk(a.chunk);
  if (!stage.has_head) {
    TakeInput(a, piece, peers_[a.chunk].gradient_from >= 0, s.local_gradient);
  }
  executed_.push_back(a);
  const ScopedSpan span(SpanKind::kBackward, nullptr, a.micro_batch);
  const Tensor d_input =
      split_backward_
          ? model_.BackwardInputStage(piece.slot, a.chunk, piece.received)
          : model_.BackwardStage(piece.slot, a.chunk, piece.received, ready ? s.on_ready : nullptr);
  // d input lives in the model until its next backward: the send takes a copy.
  if (!stage.has_embedding) {
    HandOn(s, a, d_input, peers_[a.chunk].gradient_to >= 0, s.local_gradient);
  }
  ReleaseBuffer(std::move(piece.received));
  piece.received = Tensor();
  if (!split_backward_) ReleaseSlot(s, piece);
}

void PipelineExecutor::Weight(StepState& s, const Action& a, bool ready) {
  InFlight& piece = s.in_flight[Piece(a)];
  executed_.push_back(a);
  const ScopedSpan span(SpanKind::kBackward, "weight gradients", a.micro_batch);
  model_.BackwardWeightStage(piece.slot, a.chunk, ready ? s.on_ready : nullptr);
  ReleaseSlot(s, piece);
}

void PipelineExecutor::TakeInput(const Action& a, InFlight& piece, bool received,
                                 std::vector<Tensor>& local) {
  if (received) {
    Wait(piece.receive);
    executed_.push_back(piece.receive_action);
    return;
  }
  TETRA_CHECK(local[a.micro_batch].defined())
      << ActionText(a) << " before the chunk that feeds it on this rank";
  piece.received = std::move(local[a.micro_batch]);
  local[a.micro_batch] = Tensor();
}

void PipelineExecutor::HandOn(StepState& s, const Action& a, const Tensor& result, bool sent,
                              std::vector<Tensor>& local) {
  (sent ? s.outputs[Piece(a)] : local[a.micro_batch]) = CopyToBuffer(result);
}

int PipelineExecutor::TakeSlot(StepState& s) {
  const auto free_slot = std::find(s.slot_busy.begin(), s.slot_busy.end(), false);
  const int slot = static_cast<int>(free_slot - s.slot_busy.begin());
  if (free_slot == s.slot_busy.end()) {
    s.slot_busy.push_back(true);
  } else {
    *free_slot = true;
  }
  peak_activations_ = std::max(peak_activations_, ++s.live_activations);
  return slot;
}

void PipelineExecutor::ReleaseSlot(StepState& s, InFlight& piece) {
  s.slot_busy[piece.slot] = false;
  --s.live_activations;
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
