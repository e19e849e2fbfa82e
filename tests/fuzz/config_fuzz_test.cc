// Fuzzing the config text format and `--set` overrides
// (tests/fuzz/config_target.h says what each input must satisfy): the text
// campaign starts from the recipes in configs/, the override campaign from
// one valid --set of every kind of field.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/config_target.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

TEST(ConfigFuzzTest, EveryTextParsesSoundOrFailsWithAShortUserError) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  std::vector<std::string> corpus;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(TETRA_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() == ".textproto") {
      corpus.push_back(testing::ReadBytes(entry.path()));
    }
  }
  std::sort(corpus.begin(), corpus.end());
  testing::Run({.parser = "config_text",
                .corpus = corpus,
                .seed = 100,
                .mutations = 10000,
                .max_truncated_bytes = 1200,
                .problem = testing::ConfigTextProblem});
}

TEST(ConfigFuzzTest, EveryOverrideAppliesSoundOrFailsWithAShortUserError) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  testing::Run({.parser = "config_set",
                .corpus = {"train.steps=20", "optimizer.lr=1e-3", "train.seed=18446744073709551615",
                           "model.moe.scoring_func=softmax", "parallel.schedule=GPIPE",
                           "data.path=data/fineweb_train_*.bin", "model.tie_word_embeddings=true",
                           "log.peak_tflops=989.5", "train.device=CPU", "model.moe=1",
                           "train.steps.x=1", "parallel.pipeline_layers=1"},
                .seed = 200,
                .mutations = 40000,
                .problem = testing::ConfigSetProblem});
}

}  // namespace
}  // namespace tetra
