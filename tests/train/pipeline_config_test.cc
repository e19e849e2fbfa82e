// ValidateConfig with pipeline parallelism: GPipe, 1F1B and interleaved 1F1B
// pipelines, with tied embeddings or not, an export and evaluation, are
// accepted; virtual stages without a pipeline and layer counts that do not
// split are refused with errors naming the fields.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/config_validation.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

// A 4-layer model on a pipeline of 2 ranks, 8 micro-batches per step.
TrainerConfig PipelineConfig() {
  TrainerConfig c;
  ModelConfig& m = *c.mutable_model();
  m.set_vocab_size(64);
  m.set_hidden_size(32);
  m.set_num_hidden_layers(4);
  m.set_num_attention_heads(4);
  m.set_intermediate_size(64);
  m.set_tie_word_embeddings(false);
  c.mutable_train()->set_steps(2);
  c.mutable_train()->set_seq_length(16);
  c.mutable_train()->set_global_batch_size(16);
  c.mutable_train()->set_micro_batch_size(2);
  c.mutable_parallel()->set_pipeline(2);
  return c;
}

TEST(PipelineConfig, AcceptsOneFOneBAndGPipe) {
  TrainerConfig c = PipelineConfig();
  EXPECT_TRUE(ValidateConfig(c, 2).ok()) << ValidateConfig(c, 2);
  c.mutable_parallel()->set_schedule(ParallelConfig::GPIPE);
  EXPECT_TRUE(ValidateConfig(c, 4).ok()) << ValidateConfig(c, 4);  // with dp 2
}

TEST(PipelineConfig, AcceptsInterleavingAndTiedEmbeddings) {
  TrainerConfig c = PipelineConfig();
  c.mutable_parallel()->set_virtual_stages(2);
  EXPECT_TRUE(ValidateConfig(c, 2).ok()) << ValidateConfig(c, 2);
  c.mutable_model()->set_tie_word_embeddings(true);
  EXPECT_TRUE(ValidateConfig(c, 2).ok()) << ValidateConfig(c, 2);
}

TEST(PipelineConfig, AcceptsExportAndEvaluation) {
  TrainerConfig c = PipelineConfig();
  c.set_export_path("/tmp/out");
  c.mutable_data()->set_format(DataConfig::LLMC);
  c.mutable_data()->set_path("/tmp/train.bin");
  c.mutable_data()->set_valid_path("/tmp/valid.bin");
  EXPECT_TRUE(ValidateConfig(c, 2).ok()) << ValidateConfig(c, 2);
}

TEST(PipelineConfig, RefusesVirtualStagesWithoutPipelineAndUnevenLayers) {
  TrainerConfig c = PipelineConfig();
  c.mutable_parallel()->set_pipeline(1);
  c.mutable_parallel()->set_virtual_stages(2);
  EXPECT_THAT(std::string(ValidateConfig(c, 2).message()),
              HasSubstr("parallel.virtual_stages is 2"));
  c = PipelineConfig();
  c.mutable_parallel()->set_virtual_stages(2);
  c.mutable_model()->set_num_hidden_layers(6);  // not a multiple of 2 x 2 virtual stages
  EXPECT_THAT(std::string(ValidateConfig(c, 2).message()), HasSubstr("num_hidden_layers"));
  c = PipelineConfig();
  c.mutable_model()->set_num_hidden_layers(3);
  EXPECT_THAT(std::string(ValidateConfig(c, 2).message()),
              HasSubstr("model.num_hidden_layers = 3"));
}

}  // namespace
}  // namespace tetra
