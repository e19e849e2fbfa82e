// One optimizer step of one rank, and evaluation, on the one path every
// layout takes: the step's micro-batches through the pipeline executor (the
// one-stage schedule without pipeline parallelism), then the model
// optimizer's gradient finalisation and update.
//
//   TrainStep::Run
//     ModelOptimizer::StartStep                     zero gradients, MoE stats
//     PipelineExecutor::Step                        forwards and backwards, DP
//       LanguageModel::ForwardStage / BackwardStage   buckets launched during
//                                                     the last backward
//     ModelOptimizer::FinalizeGradients             buckets, replica sums, norm
//     ModelOptimizer::Step                          clip, AdamW, MoE biases
#ifndef TETRA_TRAIN_TRAIN_STEP_H_
#define TETRA_TRAIN_TRAIN_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/sample_source.h"
#include "model/language_model.h"
#include "observe/metrics_log.h"
#include "optimizer/model_optimizer.h"
#include "parallel/context_shard.h"
#include "parallel/parallel_state.h"
#include "pipeline/executor.h"
#include "proto/config.pb.h"

namespace tetra {

class TrainStep {
 public:
  // Everything outlives the step.
  TrainStep(const TrainerConfig& config, const ParallelState& parallel, SampleSource& data,
            LanguageModel& model, ModelOptimizer& optimizer, PipelineExecutor& executor);

  int64_t tokens_per_step() const { return global_batch_ * seq_; }

  // Optimizer step `step` (from 1): fills m's loss, grad_norm and lr and the
  // MoE fields. A non-finite loss or norm updates nothing and is an error;
  // so is a sample that fails to load on any rank (every rank returns an
  // error). Collective over the world.
  absl::Status Run(int64_t step, StepMetrics& m);
  // The last step's measured pipeline bubble (pipeline > 1), collective over the world.
  void AddBubble(StepMetrics& m) const;

  // Mean token cross-entropy over the first log.eval_batches global batches
  // of `validation` (the same samples at every evaluation, so values
  // compare): batch-group rank r evaluates micro-batches r, r + dp, ...
  // A failed load on any rank fails it on every rank. Collective over the world.
  absl::StatusOr<double> Evaluate(SampleSource& validation);

 private:
  // Samples first .. first + micro_ - 1 of `source` into the executor's
  // buffers: this rank's chunks of each under context parallelism.
  absl::Status LoadMicroBatch(SampleSource& source, int64_t first, int32_t* inputs,
                              int32_t* targets);

  const TrainerConfig& config_;
  const ParallelState& parallel_;
  SampleSource& data_;
  LanguageModel& model_;
  ModelOptimizer& optimizer_;
  PipelineExecutor& executor_;
  const int64_t seq_, micro_, global_batch_, rank_batch_;
  const ContextShard context_;
  std::vector<int32_t> whole_inputs_, whole_targets_;  // whole sequences, before ContextShard picks
};

}  // namespace tetra

#endif  // TETRA_TRAIN_TRAIN_STEP_H_
