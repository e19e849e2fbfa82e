#include "data/training_data.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "data/blended_sample_loader.h"
#include "data/data_blend.h"
#include "data/sample_loader.h"
#include "data/synthetic_source.h"
#include "data/token_stream.h"

namespace tetra {
namespace {

struct OpenedSamples {
  std::unique_ptr<SampleSource> samples;
  std::string description;
};

// `path`, the value of config field `field` (data.path or data.valid_path),
// as samples: for MEGATRON a weighted blend "w1 prefix1 w2 prefix2 ..." is a
// BlendedSampleLoader over one SampleLoader per prefix (each may be a glob);
// anything else is one stream.
absl::StatusOr<OpenedSamples> OpenFileSamples(const TrainerConfig& config, const std::string& field,
                                              const std::string& path, bool shuffle) {
  const DataConfig& data = config.data();
  const int64_t vocab = config.model().vocab_size(), seq = config.train().seq_length();
  const uint64_t seed = config.train().seed();
  DataBlend blend{.prefixes = {path}, .weights = {}};
  if (data.format() == DataConfig::MEGATRON) {
    ASSIGN_OR_RETURN(blend, ParseDataBlend(path, field));
  }
  if (blend.weights.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenStream> stream,
                     OpenTokenFiles(data.format(), blend.prefixes[0]));
    std::string description = absl::StrFormat("%s (%d tokens)", blend.prefixes[0], stream->size());
    ASSIGN_OR_RETURN(SampleLoader loader,
                     SampleLoader::Create(std::move(stream), seq, shuffle, seed, vocab));
    return OpenedSamples{std::make_unique<SampleLoader>(std::move(loader)), std::move(description)};
  }
  std::vector<SampleLoader> data_sets;
  std::vector<std::string> parts;
  for (size_t d = 0; d < blend.prefixes.size(); ++d) {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenStream> stream,
                     OpenTokenFiles(data.format(), blend.prefixes[d]));
    parts.push_back(absl::StrFormat("%.4g %s (%d tokens)", blend.weights[d], blend.prefixes[d],
                                    stream->size()));
    ASSIGN_OR_RETURN(SampleLoader loader, SampleLoader::Create(std::move(stream), seq, shuffle,
                                                               seed, vocab, static_cast<int>(d)));
    data_sets.push_back(std::move(loader));
  }
  return OpenedSamples{
      std::make_unique<BlendedSampleLoader>(std::move(data_sets), std::move(blend.weights)),
      absl::StrCat("blend of ", absl::StrJoin(parts, ", "))};
}

}  // namespace

absl::StatusOr<TrainingData> OpenTrainingData(const TrainerConfig& config) {
  const DataConfig& data = config.data();
  const int64_t vocab = config.model().vocab_size(), seq = config.train().seq_length();
  TrainingData result;
  if (data.format() == DataConfig::SYNTHETIC) {
    ASSIGN_OR_RETURN(std::unique_ptr<SyntheticSource> source,
                     SyntheticSource::Create(data.synthetic(), vocab, config.train().seed(), seq));
    result.loss_floor = source->LossFloor(seq);
    result.description = absl::StrFormat(
        "synthetic order-%d Markov source, %d tokens, entropy rate %.4f nats, loss floor %.4f nats",
        data.synthetic().order(), source->size(), source->EntropyRate(), *result.loss_floor);
    ASSIGN_OR_RETURN(
        SampleLoader loader,
        SampleLoader::Create(std::move(source), seq, data.shuffle(), config.train().seed(), vocab));
    result.loader = std::make_unique<SampleLoader>(std::move(loader));
  } else {
    ASSIGN_OR_RETURN(OpenedSamples train,
                     OpenFileSamples(config, "data.path", data.path(), data.shuffle()));
    result.loader = std::move(train.samples);
    result.description = std::move(train.description);
  }
  result.loader->set_epoch_callback([](const std::string& data_set, int64_t epoch) {
    TETRA_LOG() << "tetra: data exhausted (" << data_set << "), starting epoch " << epoch;
  });
  if (!data.valid_path().empty()) {
    ASSIGN_OR_RETURN(OpenedSamples valid, OpenFileSamples(config, "data.valid_path",
                                                          data.valid_path(), /*shuffle=*/false));
    result.validation = std::move(valid.samples);
  }
  return result;
}

}  // namespace tetra
