// The run's training data from `data { ... }`: the synthetic Markov source
// (with its exact loss floor) or token files, addressed by sample index; token
// ids are checked against the vocabulary as samples load.
#ifndef TETRA_TRAIN_TRAINING_DATA_H_
#define TETRA_TRAIN_TRAINING_DATA_H_

#include <optional>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "train/sample_loader.h"

namespace tetra {

struct TrainingData {
  SampleLoader loader;
  std::optional<SampleLoader> validation;  // data.valid_path, never shuffled
  std::optional<double> loss_floor;  // SYNTHETIC only
  std::string description;           // one line for the run's banner
};

absl::StatusOr<TrainingData> OpenTrainingData(const TrainerConfig& config);

}  // namespace tetra

#endif  // TETRA_TRAIN_TRAINING_DATA_H_
