// Everything one rank's training run is made of, built once before its first
// step, in the order each part needs the ones before it: the device and
// threads, the memory check, the checkpoint lock, the data, the model (with
// its weights from init_from), the optimizer, the pipeline executor and the
// step, and the state of a checkpoint to resume from.
#ifndef TETRA_TRAIN_TRAINING_RUN_H_
#define TETRA_TRAIN_TRAINING_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_lock.h"
#include "core/tensor.h"
#include "data/training_data.h"
#include "model/language_model.h"
#include "optimizer/model_optimizer.h"
#include "parallel/parallel_state.h"
#include "pipeline/executor.h"
#include "proto/config.pb.h"
#include "train/train_step.h"

namespace tetra {

// Members are built in declaration order and destroyed in reverse: the
// placement (the model's device and compute dtype) outlives every tensor.
struct TrainingRun {
  std::optional<ScopedPlacement> placement;
  double peak_tflops = 0;  // dense peak for MFU; 0: unknown, no MFU
  std::optional<CheckpointLock> lock;
  TrainingData data;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<ModelOptimizer> optimizer;
  std::unique_ptr<PipelineExecutor> executor;
  std::unique_ptr<TrainStep> step;
  double flops_per_step = 0;
  double num_parameters = 0;  // over the whole model, every pipeline stage and expert
  int64_t resumed = 0;        // the step a checkpoint resumed at (0: none)
};

// Builds the run and prints its banner on `progress`. Collective over the world.
absl::StatusOr<std::unique_ptr<TrainingRun>> BuildTrainingRun(const TrainerConfig& config,
                                                              const ParallelState& parallel,
                                                              std::ostream& progress);

}  // namespace tetra

#endif  // TETRA_TRAIN_TRAINING_RUN_H_
