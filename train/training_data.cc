#include "train/training_data.h"

#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "train/synthetic_source.h"
#include "train/token_stream.h"

namespace tetra {

absl::StatusOr<TrainingData> OpenTrainingData(const TrainerConfig& config) {
  const DataConfig& data = config.data();
  const int64_t vocab = config.model().vocab_size(), seq = config.train().seq_length();
  std::unique_ptr<TokenStream> stream;
  std::optional<double> loss_floor;
  std::string description;
  if (data.format() == DataConfig::SYNTHETIC) {
    ASSIGN_OR_RETURN(std::unique_ptr<SyntheticSource> source,
                     SyntheticSource::Create(data.synthetic(), vocab, config.train().seed(), seq));
    loss_floor = source->LossFloor(seq);
    description = absl::StrFormat(
        "synthetic order-%d Markov source, %d tokens, entropy rate %.4f nats, loss floor %.4f nats",
        data.synthetic().order(), source->size(), source->EntropyRate(), *loss_floor);
    stream = std::move(source);
  } else {
    ASSIGN_OR_RETURN(stream, OpenTokenFiles(data.format(), data.path()));
    description = absl::StrFormat("%s (%d tokens)", data.path(), stream->size());
  }
  ASSIGN_OR_RETURN(SampleLoader loader, SampleLoader::Create(std::move(stream), seq, data.shuffle(),
                                                             config.train().seed(), vocab));
  loader.set_epoch_callback([](int64_t epoch) {
    TETRA_LOG() << "tetra: data exhausted, starting epoch " << epoch;
  });
  std::optional<SampleLoader> validation;
  if (!data.valid_path().empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenStream> valid, OpenTokenFiles(data.format(), data.valid_path()));
    ASSIGN_OR_RETURN(validation, SampleLoader::Create(std::move(valid), seq, /*shuffle=*/false,
                                                      config.train().seed(), vocab));
  }
  return TrainingData{std::move(loader), std::move(validation), loss_floor, description};
}

}  // namespace tetra
