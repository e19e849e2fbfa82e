#include "train/train_step.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "optimizer/lr_schedule.h"

namespace tetra {
namespace {

// The step's loss: the loss group's token losses on every stage (only the
// last stage has any), over the global token count.
double StepLoss(const ParallelState& parallel, double local_sum, double tokens) {
  return SumOverRanks(parallel.pipeline(), SumOverRanks(parallel.loss(), local_sum)) / tokens;
}

}  // namespace

TrainStep::TrainStep(const TrainerConfig& config, const ParallelState& parallel, SampleSource& data,
                     LanguageModel& model, ModelOptimizer& optimizer, PipelineExecutor& executor)
    : config_(config),
      parallel_(parallel),
      data_(data),
      model_(model),
      optimizer_(optimizer),
      executor_(executor),
      seq_(config.train().seq_length()),
      micro_(config.train().micro_batch_size()),
      global_batch_(config.train().global_batch_size()),
      rank_batch_(global_batch_ / parallel.batch().size()),
      context_{.size = parallel.context().size(), .rank = parallel.context().rank()} {}

absl::Status TrainStep::LoadMicroBatch(SampleSource& source, int64_t first, int32_t* inputs,
                                       int32_t* targets) {
  if (context_.size == 1) return source.Load(first, micro_, inputs, targets);
  whole_inputs_.resize(micro_ * seq_);
  whole_targets_.resize(micro_ * seq_);
  RETURN_IF_ERROR(source.Load(first, micro_, whole_inputs_.data(), whole_targets_.data()));
  context_.SelectTokens(whole_inputs_.data(), micro_, seq_, inputs);
  context_.SelectTokens(whole_targets_.data(), micro_, seq_, targets);
  return absl::OkStatus();
}

absl::Status TrainStep::Run(int64_t step, StepMetrics& m) {
  optimizer_.StartStep();
  // Batch-group rank r takes samples r*B/dp .. (r+1)*B/dp - 1 of the step,
  // micro-batch k the k-th run of micro_ of them (the ranks of a context
  // group read the same samples and keep their own chunks).
  const int64_t first_sample = (step - 1) * global_batch_ + parallel_.batch().rank() * rank_batch_;
  const absl::StatusOr<double> loss_sum = executor_.Step(
      [&](int k, int32_t* inputs, int32_t* targets) {
        return LoadMicroBatch(data_, first_sample + k * micro_, inputs, targets);
      },
      1.0f / static_cast<float>(tokens_per_step()),
      [&](int64_t ready) { optimizer_.GradientsReadyFrom(ready); });
  // Gradients finish on every rank, failed or not, so that a failed load ends
  // the step everywhere here instead of leaving the others in a collective.
  const FinalizedGradients gradients = optimizer_.FinalizeGradients();
  RETURN_IF_ERROR(AgreeOnStatus(parallel_.world(), loss_sum.status()));
  // After the gradient buckets, which share the loss group's communicator.
  m.loss = StepLoss(parallel_, *loss_sum, static_cast<double>(tokens_per_step()));
  if (config_.model().num_nextn_predict_layers() > 0) {
    m.mtp_loss =
        StepLoss(parallel_, model_.TakeMtpLossSum(), static_cast<double>(tokens_per_step()));
  }

  const ScopedSpan optimizer_span(SpanKind::kOptimizer);
  m.grad_norm = gradients.grad_norm;
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    return UserError(
        absl::StrFormat("training diverged at step %d: loss %g, gradient norm %g (weights were "
                        "not updated)",
                        step, m.loss, m.grad_norm),
        absl::StrFormat("lower optimizer.lr (now %g), add optimizer.warmup_steps, or keep "
                        "optimizer.clip_grad > 0",
                        config_.optimizer().lr()),
        absl::StatusCode::kInternal);
  }
  m.lr = LearningRate(config_.optimizer(), step, config_.train().steps());
  optimizer_.Step(gradients, m.lr, step);
  if (gradients.moe) {
    const MoeStepStats& moe = gradients.moe->stats;
    m.aux_loss = moe.aux_loss;
    m.moe_load_imbalance = moe.load_imbalance;
    m.dropped_tokens = moe.dropped_tokens;
    if (parallel_.world().size() > 1) m.all_to_all_bytes = moe.all_to_all_bytes;
  }
  return absl::OkStatus();
}

void TrainStep::AddBubble(StepMetrics& m) const {
  if (parallel_.pipeline().size() == 1) return;
  // Mean over ranks of the time each waited on its pipeline neighbours.
  m.bubble_fraction =
      SumOverRanks(parallel_.world(), executor_.wait_seconds() / executor_.step_seconds()) /
      parallel_.world().size();
}

absl::StatusOr<double> TrainStep::Evaluate(SampleSource& validation) {
  const int64_t samples =
      std::min(config_.log().eval_batches() * global_batch_, validation.samples_per_epoch()) /
      micro_ * micro_;
  if (samples == 0) {
    return UserError(
        absl::StrCat("data.valid_path holds ", validation.samples_per_epoch(), " samples of ", seq_,
                     " tokens, fewer than one micro-batch of ", micro_),
        "use a larger validation set or a smaller train.micro_batch_size");
  }
  Communicator& batch = parallel_.batch();
  const int64_t micro_batches = samples / micro_;
  // This rank's k-th micro-batch is micro-batch batch.rank() + k batch.size().
  const int64_t mine = (micro_batches - batch.rank() + batch.size() - 1) / batch.size();
  const absl::StatusOr<double> loss_sum = executor_.EvaluateLoss(
      [&](int k, int32_t* inputs, int32_t* targets) {
        return LoadMicroBatch(validation, (batch.rank() + k * batch.size()) * micro_, inputs,
                              targets);
      },
      static_cast<int>(mine));
  RETURN_IF_ERROR(AgreeOnStatus(parallel_.world(), loss_sum.status()));
  return StepLoss(parallel_, *loss_sum, static_cast<double>(samples * seq_));
}

}  // namespace tetra
