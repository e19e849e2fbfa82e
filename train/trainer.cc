#include "train/trainer.h"

#include <memory>

#include "checkpoint/weights_io.h"
#include "core/status_macros.h"
#include "train/checkpoint_policy.h"
#include "train/run_reporter.h"
#include "train/training_run.h"

namespace tetra {
namespace {

// The mean validation loss every log.eval_interval steps and at the last.
bool EvaluationDue(const TrainerConfig& config, const TrainingRun& run, int64_t step) {
  const int interval = config.log().eval_interval();
  return run.data.validation &&
         ((interval > 0 && step % interval == 0) || step == config.train().steps());
}

// The ranks of the first expert-data-parallel replica (the first data-parallel
// rank when ep is 1) of every pipeline stage take part.
absl::Status ExportWhenAsked(const TrainerConfig& config, const ParallelState& parallel,
                             TrainingRun& run, std::ostream& progress) {
  if (config.export_path().empty() || parallel.expert_data().rank() != 0) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ExportWeights(config.export_path(), run.model->parameters(), config.model(),
                                config.train().seq_length(), DType::kF32, parallel.tensor(),
                                parallel.is_logging_rank(), &parallel.expert(),
                                &parallel.pipeline(), config.init_from()));
  progress << "tetra: weights exported to " << config.export_path() << "\n";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainerConfig& config, const ParallelState& parallel,
                                  std::ostream& progress_stream) {
  // Progress and metrics come from one rank; the others compute the same numbers.
  std::ostream null_stream(nullptr);
  std::ostream& progress = parallel.is_logging_rank() ? progress_stream : null_stream;
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingRun> run, BuildTrainingRun(config, parallel, progress));
  RunReporter reporter(config, parallel, *run, progress);
  CheckpointPolicy checkpoints(config, parallel, progress);
  RETURN_IF_ERROR(reporter.Start());
  TrainResult result;
  // int64: a run of train.steps = INT_MAX steps ends without overflow.
  for (int64_t step = run->resumed + 1; step <= config.train().steps(); ++step) {
    StepMetrics m;
    m.step = step;
    reporter.BeginStep(step);
    RETURN_IF_ERROR(run->step->Run(step, m));
    RETURN_IF_ERROR(reporter.EndStep(m));
    if (EvaluationDue(config, *run, step)) {
      ASSIGN_OR_RETURN(m.val_loss, run->step->Evaluate(*run->data.validation));
    }
    // The step's line is written before its checkpoint, so a checkpoint's
    // step always has its line; the save's stall goes on the next step's.
    m.checkpoint_stall_s = checkpoints.TakeStall();
    RETURN_IF_ERROR(reporter.Log(m));
    result.steps.push_back(m);
    ASSIGN_OR_RETURN(const bool stop, checkpoints.AfterStep(step, *run));
    if (stop) return result;
  }
  reporter.Summary(result.steps);
  RETURN_IF_ERROR(ExportWhenAsked(config, parallel, *run, progress));
  return result;
}

}  // namespace tetra
