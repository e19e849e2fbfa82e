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
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    TETRA_CHECK(a.chunk >= 0 && a.chunk < model_.num_chunks())
        << ActionText(a) << ": the model holds " << model_.num_chunks() << " chunks";
    micro_batches_ = std::max(micro_batches_, a.micro_batch + 1);
    if (a.type == ActionType::kBackward) last_backward_ = static_cast<int>(i);
  }
  // The gradient-ready callback promises a suffix of the flat buffers, which
  // holds only when the step's last backward runs the first chunk.
  TETRA_CHECK(last_backward_ < 0 || actions_[last_backward_].chunk == 0)
      << "the schedule's last backward is not on chunk 0";
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
      << "pipeline message of shape " << ShapeString(data.shape()) << ", expected (" << rows_ << ", "
      << hidden_ << ")";
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

absl::StatusOr<double> PipelineExecutor::Step(const LoadMicroBatch& load, float grad_scale,
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
  const int pieces = micro_batches_ * model_.num_chunks();
  auto piece = [&](const Action& a) { return a.chunk * micro_batches_ + a.micro_batch; };
  std::vector<InFlight> in_flight(pieces);
  std::vector<bool> slot_busy;
  std::vector<Tensor> outputs(pieces);  // pool buffers holding what a forward or backward sends
  // Waits for the receive a computation reads and records where it waited.
  auto await_input = [&](InFlight& mb) {
    Wait(mb.receive);
    executed_.push_back(mb.receive_action);
  };
  double loss_sum = 0;
  int live_activations = 0;
  peak_activations_ = 0;
  absl::Status status;

  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    InFlight& mb = in_flight[piece(a)];
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
        Tensor& out = outputs[piece(a)];
        TETRA_CHECK(out.defined()) << ActionText(a) << " before its computation";
        Send(std::move(out), a.peer);
        executed_.push_back(a);
        out = Tensor();
        break;
      }
      case ActionType::kForward: {
        const auto free_slot = std::find(slot_busy.begin(), slot_busy.end(), false);
        mb.slot = static_cast<int>(free_slot - slot_busy.begin());
        if (free_slot == slot_busy.end()) slot_busy.push_back(true);
        else *free_slot = true;
        peak_activations_ = std::max(peak_activations_, ++live_activations);
        if (stage.has_embedding || stage.has_head) Load(load, a.micro_batch, &status);
        if (!stage.has_embedding) await_input(mb);
        executed_.push_back(a);
        double stage_loss = 0;
        const ScopedSpan span(SpanKind::kForward, nullptr, a.micro_batch);
        const Tensor out = model_.ForwardStage(mb.slot, a.chunk, inputs_.data(), mb.received, targets_.data(),
                                               batch_, seq_, grad_scale, &stage_loss);
        // The output lives in the slot until its next forward: the send takes a copy.
        if (!stage.has_head) outputs[piece(a)] = CopyToBuffer(out);
        ReleaseBuffer(std::move(mb.received));
        mb.received = Tensor();
        loss_sum += stage_loss;
        break;
      }
      case ActionType::kBackward: {
        if (!stage.has_head) await_input(mb);
        executed_.push_back(a);
        const ScopedSpan span(SpanKind::kBackward, nullptr, a.micro_batch);
        const Tensor d_input = model_.BackwardStage(mb.slot, a.chunk, mb.received,
                                                    static_cast<int>(i) == last_backward_ ? on_ready : nullptr);
        // d input lives in the model until its next backward: the send takes a copy.
        if (!stage.has_embedding) outputs[piece(a)] = CopyToBuffer(d_input);
        ReleaseBuffer(std::move(mb.received));
        mb.received = Tensor();
        slot_busy[mb.slot] = false;
        --live_activations;
        break;
      }
    }
  }
  ReapSends(/*all=*/true);
  step_seconds_ = step_timer.Seconds();
  RETURN_IF_ERROR(status);
  return loss_sum;
}

absl::StatusOr<double> PipelineExecutor::EvaluateLoss(const LoadMicroBatch& load, int micro_batches) {
  const int stages = pipeline_.size(), rank = pipeline_.rank();
  const int previous = (rank + stages - 1) % stages, next = (rank + 1) % stages;
  double loss_sum = 0;
  absl::Status status;
  for (int m = 0; m < micro_batches; ++m) {
    // Virtual stage c * stages + rank: its input comes from the previous
    // rank (the last one for chunk c > 0 of rank 0), its output goes to the next.
    for (int c = 0; c < model_.num_chunks(); ++c) {
      const PipelineStage& stage = model_.chunk(c);
      if (stage.has_embedding || stage.has_head) Load(load, m, &status);
      Tensor hidden;
      if (!stage.has_embedding) {
        hidden = AcquireBuffer();
        pipeline_.Recv(hidden, previous);
      }
      double loss = 0;
      const Tensor out =
          model_.EvaluateStage(0, c, inputs_.data(), hidden, targets_.data(), batch_, seq_, &loss);
      ReleaseBuffer(std::move(hidden));
      loss_sum += loss;
      if (!stage.has_head) Send(CopyToBuffer(out), next);
    }
  }
  ReapSends(/*all=*/true);
  RETURN_IF_ERROR(status);
  return loss_sum;
}

}  // namespace tetra
