// The run's training data from `data { ... }`: the synthetic Markov source
// (with its exact loss floor), token files, or a Megatron-LM weighted blend of
// data sets, addressed by sample index; token ids are checked against the
// vocabulary as samples load.
#ifndef TETRA_DATA_TRAINING_DATA_H_
#define TETRA_DATA_TRAINING_DATA_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "data/sample_source.h"
#include "proto/config.pb.h"

namespace tetra {

struct TrainingData {
  std::unique_ptr<SampleSource> loader;
  std::unique_ptr<SampleSource> validation;  // data.valid_path, never shuffled; null without one
  std::optional<double> loss_floor;          // SYNTHETIC only
  std::string description;                   // one line for the run's banner
};

absl::StatusOr<TrainingData> OpenTrainingData(const TrainerConfig& config);

}  // namespace tetra

#endif  // TETRA_DATA_TRAINING_DATA_H_
