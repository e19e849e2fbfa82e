#include "train/config_loader.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

using testing::Message;
using testing::UserErrorShape;

TEST(ConfigLoaderTest, ParsesTextFormatWithDefaults) {
  auto config = ParseConfigText("model { hidden_size: 128 }\ntrain { steps: 7 }", "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model().hidden_size(), 128);
  EXPECT_EQ(config->train().steps(), 7);
  EXPECT_DOUBLE_EQ(config->optimizer().lr(), 3e-4);  // proto/config.proto's defaults
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
  EXPECT_THAT(Message(config.status()), UserErrorShape());
  EXPECT_THAT(Message(config.status()), HasSubstr("\nhint: the config is protobuf text format; see "
                                                  "configs/tiny_dense.textproto"));
}

TEST(ConfigLoaderTest, UnknownEnumValueListsTheValidNames) {
  // protobuf places the error after the value, here at the closing brace.
  auto config = ParseConfigText("data { format: CSV }", "r.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(Message(config.status()), HasSubstr("r.textproto:1:"));
  EXPECT_THAT(Message(config.status()), HasSubstr("CSV"));
  EXPECT_THAT(Message(config.status()),
              HasSubstr("\nhint: data.format takes one of SYNTHETIC, LLMC, MEGATRON"));
  EXPECT_THAT(Message(config.status()), UserErrorShape());
  auto device = ParseConfigText("train { device: GPU }", "r.textproto");
  EXPECT_THAT(Message(device.status()), HasSubstr("train.device takes one of AUTO, CPU, CUDA"));
}

TEST(ConfigLoaderTest, UnknownFieldSuggestsNearestName) {
  auto config = ParseConfigText("model {\n  hiden_size: 64\n}\n", "r.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("r.textproto:2:"));
  EXPECT_THAT(config.status().message(), HasSubstr("hiden_size"));
  EXPECT_THAT(config.status().message(), HasSubstr("did you mean \"hidden_size\""));
  EXPECT_THAT(Message(config.status()), UserErrorShape());
}

TEST(ConfigLoaderTest, NearestNameAlsoMatchesPrefixesAndSubstrings) {
  auto hint = [](const std::string& text) {
    auto config = ParseConfigText(text, "r.textproto");
    std::string message = config.ok() ? "" : Message(config.status());
    return message.substr(message.find("\nhint: ") + 1);
  };
  // A prefix of one field (also inside num_hidden_layers, but not its start).
  EXPECT_EQ(hint("model { hidden: 64 }"), "hint: did you mean \"hidden_size\"?");
  // A field name that begins the typed one.
  EXPECT_EQ(hint("optimizer { lr_max: 0.1 }"), "hint: did you mean \"lr\"?");
  // Inside exactly one field.
  EXPECT_EQ(hint("model { nope_head_dim: 2 }"), "hint: did you mean \"qk_nope_head_dim\"?");
  // Inside several: all of them.
  EXPECT_EQ(hint("train { batch_size: 2 }"),
            "hint: did you mean one of \"global_batch_size\", \"micro_batch_size\"?");
  // Nothing related: the list of fields.
  EXPECT_THAT(hint("optimizer { momentum: 0.9 }"),
              HasSubstr("hint: the fields of OptimizerConfig are lr, min_lr, "));
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

// Megatron-style uneven splits on the command line: a repeated field takes a
// comma list, which replaces what the recipe had.
TEST(ConfigLoaderTest, SetTakesACommaListForARepeatedField) {
  TrainerConfig config;
  config.mutable_parallel()->add_pipeline_layers(8);
  ASSERT_TRUE(ApplyOverride("parallel.pipeline_layers=4,3,3,3", &config).ok());
  EXPECT_THAT(config.parallel().pipeline_layers(), ::testing::ElementsAre(4, 3, 3, 3));
  ASSERT_TRUE(ApplyOverride("model.eos_token_id=128001,128009", &config).ok());
  EXPECT_THAT(config.model().eos_token_id(), ::testing::ElementsAre(128001, 128009));
  ASSERT_TRUE(ApplyOverride("parallel.pipeline_layers=", &config).ok());
  EXPECT_TRUE(config.parallel().pipeline_layers().empty());
}

TEST(ConfigLoaderTest, DualPipeVWithoutVirtualStagesRunsTwoChunks) {
  const std::string path = ::testing::TempDir() + "dualpipe_v.textproto";
  std::ofstream(path) << "parallel { pipeline: 2 schedule: DUALPIPE_V }\n";
  absl::StatusOr<TrainerConfig> unset = LoadRecipe(path, {});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->parallel().virtual_stages(), 2);
  // Set, it is what it says (and the schedule's check refuses 1).
  absl::StatusOr<TrainerConfig> one = LoadRecipe(path, {"parallel.virtual_stages=1"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->parallel().virtual_stages(), 1);
  absl::StatusOr<TrainerConfig> one_f_one_b = LoadRecipe(path, {"parallel.schedule=ONE_F_ONE_B"});
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
  EXPECT_EQ(one_f_one_b->parallel().virtual_stages(), 1);
}

TEST(ConfigLoaderTest, SetErrorsSayWhatIsWrong) {
  TrainerConfig config;
  auto unknown = ApplyOverride("train.stpes=3", &config);
  EXPECT_THAT(unknown.message(), HasSubstr("did you mean \"steps\""));
  auto not_number = ApplyOverride("train.steps=many", &config);
  EXPECT_THAT(not_number.message(), HasSubstr("\"many\" is not a 32-bit integer"));
  EXPECT_THAT(not_number.message(),
              HasSubstr("\nhint: write a 32-bit integer, e.g. --set train.steps=100"));
  auto not_real = ApplyOverride("optimizer.lr=fast", &config);
  EXPECT_THAT(not_real.message(),
              HasSubstr("\nhint: write a number, e.g. --set optimizer.lr=0.0003"));
  auto bad_enum = ApplyOverride("data.format=CSV", &config);
  EXPECT_THAT(bad_enum.message(), HasSubstr("SYNTHETIC, LLMC, MEGATRON"));
  EXPECT_THAT(bad_enum.message(), HasSubstr("e.g. --set data.format=SYNTHETIC"));
  auto message_field = ApplyOverride("model=3", &config);
  EXPECT_THAT(message_field.message(), HasSubstr("is a message, not a scalar"));
  EXPECT_THAT(message_field.message(), HasSubstr("e.g. --set model.vocab_size=256"));
  auto no_equals = ApplyOverride("train.steps", &config);
  EXPECT_THAT(no_equals.message(), HasSubstr("expected path.to.field=value"));
  auto below_scalar = ApplyOverride("train.steps.max=3", &config);
  EXPECT_THAT(below_scalar.message(), HasSubstr("steps is a scalar and has no fields"));
  EXPECT_THAT(below_scalar.message(), HasSubstr("e.g. --set train.steps=100"));
  auto bad_element = ApplyOverride("parallel.pipeline_layers=4,x,3", &config);
  EXPECT_THAT(bad_element.message(), HasSubstr("\"x\" is not a 32-bit integer"));
  for (const absl::Status& status : {unknown, not_number, not_real, bad_enum, message_field,
                                     no_equals, below_scalar, bad_element}) {
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  EXPECT_THAT(Message(LoadConfigFile("/nonexistent/recipe.textproto").status()), UserErrorShape());
}

}  // namespace
}  // namespace tetra
