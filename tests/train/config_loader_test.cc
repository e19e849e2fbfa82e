#include "train/config_loader.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/config_validation.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

TEST(ConfigLoaderTest, ParsesTextFormatWithDefaults) {
  auto config = ParseConfigText("model { hidden_size: 128 }\ntrain { steps: 7 }", "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model().hidden_size(), 128);
  EXPECT_EQ(config->train().steps(), 7);
  EXPECT_DOUBLE_EQ(config->optimizer().lr(), 3e-4);  // DESIGN.md defaults
  EXPECT_DOUBLE_EQ(config->optimizer().min_lr(), 3e-5);
  EXPECT_DOUBLE_EQ(config->optimizer().weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(config->optimizer().beta2(), 0.95);
  EXPECT_DOUBLE_EQ(config->optimizer().clip_grad(), 1.0);
  EXPECT_EQ(config->parallel().order(), "tp-cp-ep-dp-pp");
}

TEST(ConfigLoaderTest, ParseErrorNamesFileLineAndColumn) {
  auto config = ParseConfigText("model {\n  hidden_size: 12x\n}\n", "recipe.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("recipe.textproto:2:"));
}

TEST(ConfigLoaderTest, UnknownFieldSuggestsNearestName) {
  auto config = ParseConfigText("model {\n  hiden_size: 64\n}\n", "r.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("r.textproto:2:"));
  EXPECT_THAT(config.status().message(), HasSubstr("hiden_size"));
  EXPECT_THAT(config.status().message(), HasSubstr("did you mean \"hidden_size\""));
}

TEST(ConfigLoaderTest, SetOverridesScalarsAndEnums) {
  TrainerConfig config;
  ASSERT_TRUE(ApplyOverride("train.steps=20", &config).ok());
  ASSERT_TRUE(ApplyOverride("optimizer.lr=1e-3", &config).ok());
  ASSERT_TRUE(ApplyOverride("model.tie_word_embeddings=true", &config).ok());
  ASSERT_TRUE(ApplyOverride("data.format=LLMC", &config).ok());
  ASSERT_TRUE(ApplyOverride("data.path=/tmp/x_*.bin", &config).ok());
  ASSERT_TRUE(ApplyOverride("train.device=CPU", &config).ok());
  EXPECT_EQ(config.train().steps(), 20);
  EXPECT_DOUBLE_EQ(config.optimizer().lr(), 1e-3);
  EXPECT_TRUE(config.model().tie_word_embeddings());
  EXPECT_EQ(config.data().format(), DataConfig::LLMC);
  EXPECT_EQ(config.data().path(), "/tmp/x_*.bin");
  EXPECT_EQ(config.train().device(), Device::CPU);
}

TEST(ConfigLoaderTest, SetErrorsSayWhatIsWrong) {
  TrainerConfig config;
  auto unknown = ApplyOverride("train.stpes=3", &config);
  EXPECT_THAT(unknown.message(), HasSubstr("did you mean \"steps\""));
  auto not_number = ApplyOverride("train.steps=many", &config);
  EXPECT_THAT(not_number.message(), HasSubstr("\"many\" is not a 32-bit integer"));
  auto bad_enum = ApplyOverride("data.format=CSV", &config);
  EXPECT_THAT(bad_enum.message(), HasSubstr("SYNTHETIC, LLMC, MEGATRON"));
  auto message_field = ApplyOverride("model=3", &config);
  EXPECT_THAT(message_field.message(), HasSubstr("is a message, not a scalar"));
  auto no_equals = ApplyOverride("train.steps", &config);
  EXPECT_THAT(no_equals.message(), HasSubstr("expected path.to.field=value"));
}

TEST(ConfigValidationTest, ReportsBrokenConstraintsWithNumbers) {
  TrainerConfig config;
  config.mutable_model()->set_hidden_size(100);
  config.mutable_model()->set_num_attention_heads(3);
  auto status = ValidateConfig(config);
  EXPECT_THAT(status.message(),
              HasSubstr("model.hidden_size 100 is not divisible by model.num_attention_heads 3"));
  EXPECT_THAT(status.message(), HasSubstr("hint:"));

  config = TrainerConfig();
  config.mutable_model()->set_num_key_value_heads(3);  // 4 heads
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("num_key_value_heads 3 must divide model.num_attention_heads 4"));

  config = TrainerConfig();
  config.mutable_train()->set_global_batch_size(10);
  config.mutable_train()->set_micro_batch_size(4);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("global_batch_size 10 is not a multiple of train.micro_batch_size 4"));

  config = TrainerConfig();
  config.mutable_data()->set_format(DataConfig::LLMC);
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("data.path is empty"));

  EXPECT_TRUE(ValidateConfig(TrainerConfig()).ok());
}

}  // namespace
}  // namespace tetra
