// Weight import from files, sharded indexes and Hugging Face directories
// (WeightFiles, LoadWeights) and export to model directories.
#include "checkpoint/weights_io.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weight_files.h"
#include "comm/self_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

ModelConfig TinyModel() {
  ModelConfig m;
  m.set_vocab_size(16);
  m.set_hidden_size(8);
  m.set_num_hidden_layers(2);
  m.set_num_attention_heads(2);
  m.set_intermediate_size(12);
  return m;
}

class WeightsIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::ScratchDir("weights_io_test")) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
  }

  // The whole model of `config` drawn from `seed`, exported to dir_/name.
  std::string Export(const ModelConfig& config, uint64_t seed, const std::string& name) {
    LanguageModel model(config, seed);
    SelfCommunicator self;
    const std::string out = (dir_ / name).string();
    EXPECT_TRUE(ExportWeights(out, model.parameters(), config, 16, DType::kF32, self, true).ok());
    return out;
  }

  // TinyModel drawn from seed 5, edited by `edit`, exported to dir_/name.
  template <typename Edit>
  std::string ExportEditedTinyModel(const std::string& name, Edit edit) {
    LanguageModel source(TinyModel(), 5);
    edit(source.parameters());
    SelfCommunicator self;
    const std::string out = (dir_ / name).string();
    EXPECT_TRUE(
        ExportWeights(out, source.parameters(), TinyModel(), 16, DType::kF32, self, true).ok());
    return out;
  }

  fs::path dir_;
};

TEST_F(WeightsIoTest, WholeModelTensorsAreWhatTheSingleRankModelRegisters) {
  ModelConfig moe = TinyModel();
  moe.set_num_hidden_layers(3);
  moe.mutable_moe()->set_n_routed_experts(4);
  moe.mutable_moe()->set_num_experts_per_tok(2);
  moe.mutable_moe()->set_n_shared_experts(1);
  moe.mutable_moe()->set_moe_intermediate_size(4);
  moe.mutable_moe()->set_first_k_dense_replace(1);
  ModelConfig tied = TinyModel();
  tied.set_tie_word_embeddings(true);
  for (const ModelConfig& config : {TinyModel(), tied, moe}) {
    LanguageModel model(config, 1);
    const std::vector<ModelTensor> tensors = WholeModelTensors(config);
    ASSERT_EQ(tensors.size(), model.parameters().all().size());
    size_t i = 0;
    for (const Parameter& p : model.parameters().all()) {
      EXPECT_EQ(tensors[i].name, p.name);
      EXPECT_EQ(tensors[i].shape, p.global_shape) << p.name;
      ++i;
    }
  }
  // 3 + 2 x (2 norms + 4 attention + 3 MLP) tensors, described without memory
  // even when the model is far too large to build.
  EXPECT_EQ(WholeModelTensors(TinyModel()).size(), 21u);
  ModelConfig huge = TinyModel();
  huge.set_hidden_size(1 << 16);
  huge.set_num_attention_heads(512);
  huge.set_intermediate_size(1 << 18);
  huge.set_num_hidden_layers(20000);  // 10^15 parameters
  EXPECT_EQ(WholeModelTensors(huge).size(), 3u + 20000 * 9);
}

TEST_F(WeightsIoTest, APipelineStageLoadsItsPartOfTheWholeFile) {
  const std::string weights = Export(TinyModel(), 5, "whole");
  // The second stage: layer 1, the final norm and the head.
  LanguageModel stage(
      TinyModel(), 1,
      {.chunks = {PipelineStage{.first_layer = 1, .num_layers = 1, .has_embedding = false}}});
  const absl::Status status = LoadWeights(weights, TinyModel(), stage.parameters());
  ASSERT_TRUE(status.ok()) << status;
  LanguageModel whole(TinyModel(), 5);
  for (const Parameter& p : stage.parameters().all()) {
    const Parameter* expected = whole.parameters().Find(p.name);
    ASSERT_NE(expected, nullptr) << p.name;
    for (int64_t i = 0; i < p.value.numel(); ++i)
      ASSERT_EQ(p.value.f32()[i], expected->value.f32()[i]) << p.name;
  }
}

TEST_F(WeightsIoTest, TheFileIsHeldAgainstTheWholeModel) {
  const std::string weights = Export(TinyModel(), 5, "whole") + "/model.safetensors";
  ModelConfig deeper = TinyModel();
  deeper.set_num_hidden_layers(3);
  LanguageModel model(deeper, 1);
  absl::Status status = LoadWeights(weights, deeper, model.parameters());
  EXPECT_THAT(Message(status), HasSubstr("9 missing (model.layers.2."));
  EXPECT_THAT(Message(status), UserErrorShape());
  ModelConfig shallower = TinyModel();
  shallower.set_num_hidden_layers(1);
  LanguageModel small(shallower, 1);
  status = LoadWeights(weights, shallower, small.parameters());
  EXPECT_THAT(Message(status), HasSubstr("9 not in the model (\"model.layers.1."));
  ModelConfig wider = TinyModel();
  wider.set_intermediate_size(16);
  LanguageModel wide(wider, 1);
  status = LoadWeights(weights, wider, wide.parameters());
  EXPECT_THAT(Message(status),
              HasSubstr("model.layers.0.mlp.gate_proj.weight is [12, 8] in the file but [16, 8]"));
}

TEST_F(WeightsIoTest, NonFiniteWeightsAreRefusedAndTheModelIsUnchanged) {
  const std::string out = ExportEditedTinyModel("nan", [](ParameterStore& store) {
    store.Find("model.layers.1.mlp.up_proj.weight")->value.f32()[7] = NAN;
  });
  LanguageModel model(TinyModel(), 1);
  const float before = model.parameters().all().front().value.f32()[0];
  const absl::Status status = LoadWeights(out, TinyModel(), model.parameters());
  EXPECT_THAT(Message(status),
              HasSubstr("tensor model.layers.1.mlp.up_proj.weight holds nan at element 7"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_EQ(model.parameters().all().front().value.f32()[0], before);
}

// Finite but absurd: every q_proj weight 3e38 loaded silently, and the run
// then "diverged" with a hint blaming the learning rate.
TEST_F(WeightsIoTest, WeightsNoTrainedModelHoldsAreRefusedNamingTheTensor) {
  // q_proj's element i set to value(i).
  auto set_q_proj = [](float (*value)(int64_t)) {
    return [value](ParameterStore& store) {
      Tensor& q = store.Find("model.layers.0.self_attn.q_proj.weight")->value;
      for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = value(i);
    };
  };
  const std::string out =
      ExportEditedTinyModel("absurd", set_q_proj([](int64_t) { return 3e38f; }));
  LanguageModel model(TinyModel(), 1);
  const float before = model.parameters().all().front().value.f32()[0];
  const absl::Status status = LoadWeights(out, TinyModel(), model.parameters());
  EXPECT_THAT(Message(status), HasSubstr("tensor model.layers.0.self_attn.q_proj.weight holds "
                                         "3e+38 at element 0, beyond float16's range (65504)"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_EQ(model.parameters().all().front().value.f32()[0], before);

  // The largest magnitude float16 holds is still a weight.
  const std::string edge = ExportEditedTinyModel(
      "edge", set_q_proj([](int64_t i) { return i % 2 ? 65504.0f : -65504.0f; }));
  EXPECT_TRUE(LoadWeights(edge, TinyModel(), model.parameters()).ok());
}

TEST_F(WeightsIoTest, AShardedIndexAndItsShardsMustAgree) {
  const std::string whole = Export(TinyModel(), 5, "whole") + "/model.safetensors";
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(whole);
  ASSERT_TRUE(file.ok());
  // Two shards: the embedding alone, everything else.
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensorRef> first, second;
  std::string weight_map;
  for (const SafetensorsEntry& e : file->entries()) {
    data.emplace_back(NumElements(e.shape));
    ASSERT_TRUE(file->ReadF32(e.name, data.back().data()).ok());
    const bool is_first = e.name == "model.embed_tokens.weight";
    (is_first ? first : second).push_back({e.name, e.shape, data.back().data()});
    weight_map += (weight_map.empty() ? "" : ", ") + ("\"" + e.name + "\": \"") +
                  (is_first ? "a.safetensors" : "b.safetensors") + "\"";
  }
  const fs::path sharded = dir_ / "sharded";
  fs::create_directories(sharded);
  ASSERT_TRUE(WriteSafetensors((sharded / "a.safetensors").string(), first, DType::kF32).ok());
  ASSERT_TRUE(WriteSafetensors((sharded / "b.safetensors").string(), second, DType::kBF16).ok());
  const std::string index = (sharded / "model.safetensors.index.json").string();
  testing::WriteBytes(index, "{\"metadata\": {}, \"weight_map\": {" + weight_map + "}}");
  for (const std::string& path : {index, sharded.string()}) {  // the index, or its directory
    absl::StatusOr<WeightFiles> files = WeightFiles::Open(path);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(files->entries().size(), file->entries().size());
    LanguageModel model(TinyModel(), 1);
    ASSERT_TRUE(LoadWeights(path, TinyModel(), model.parameters()).ok());
  }

  // The index places the embedding in the other shard.
  std::string moved = weight_map;
  moved.replace(moved.find("a.safetensors"), 1, "b");
  testing::WriteBytes(index, "{\"weight_map\": {" + moved + "}}");
  EXPECT_THAT(Message(WeightFiles::Open(index).status()),
              HasSubstr("tensor \"model.embed_tokens.weight\" is not in b.safetensors"));
  // A shard holds a tensor the index does not list.
  testing::WriteBytes(index,
                      "{\"weight_map\": {" + weight_map.substr(0, weight_map.rfind(", ")) + "}}");
  EXPECT_THAT(Message(WeightFiles::Open(index).status()),
              HasSubstr("holds tensor \"lm_head.weight\", which the index does not list"));
  // Shard names stay beside the index.
  testing::WriteBytes(index, "{\"weight_map\": {\"x\": \"../a.safetensors\"}}");
  EXPECT_THAT(Message(WeightFiles::Open(index).status()),
              HasSubstr("not the name of a shard file beside the index"));
  testing::WriteBytes(index, "{\"metadata\": {}}");
  EXPECT_THAT(Message(WeightFiles::Open(index).status()), HasSubstr("no \"weight_map\" object"));
  testing::WriteBytes(index, "{\"weight_map\": {,}}");
  EXPECT_THAT(Message(WeightFiles::Open(index).status()),
              HasSubstr("is not valid JSON: at byte 16"));
}

// An index or config.json that is a FIFO is refused at once, never waited on.
TEST_F(WeightsIoTest, AFifoIndexOrConfigIsAnErrorNotAHang) {
  const fs::path model = dir_ / "fifo_model";
  fs::create_directories(model);
  ASSERT_EQ(mkfifo((model / "model.safetensors.index.json").c_str(), 0600), 0);
  EXPECT_THAT(Message(WeightFiles::Open(model.string()).status()), HasSubstr("is a FIFO"));
  ASSERT_EQ(mkfifo((model / "config.json").c_str(), 0600), 0);
  EXPECT_THAT(Message(ReadHfConfigJson(HfConfigPathOf(model.string())).status()),
              HasSubstr("is a FIFO"));
}

TEST_F(WeightsIoTest, ADirectoryWithoutSafetensorsSaysWhatItHolds) {
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  absl::Status status = WeightFiles::Open(empty.string()).status();
  EXPECT_THAT(Message(status),
              HasSubstr("holds neither model.safetensors nor model.safetensors.index.json"));
  EXPECT_THAT(Message(status), UserErrorShape());
  testing::WriteBytes((empty / "pytorch_model.bin").string(), "pickle");
  status = WeightFiles::Open(empty.string()).status();
  EXPECT_THAT(Message(status), HasSubstr("only PyTorch pickle weights"));
  EXPECT_THAT(Message(status), HasSubstr("save_pretrained"));
}

TEST_F(WeightsIoTest, AnExportIsAHuggingFaceModelDirectory) {
  ModelConfig m = TinyModel();
  m.set_bos_token_id(1);
  m.add_eos_token_id(2);
  m.mutable_rope_scaling()->set_rope_type("llama3");
  const fs::path out = Export(m, 5, "exported");
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  const std::string config = testing::ReadBytes(out / "config.json");
  EXPECT_THAT(
      config,
      HasSubstr("\"max_position_embeddings\": 16"));  // no model value: the run's seq_length
  EXPECT_THAT(config, HasSubstr("\"rope_type\": \"llama3\""));
  EXPECT_THAT(testing::ReadBytes(out / "generation_config.json"), HasSubstr("\"eos_token_id\": 2"));
  EXPECT_EQ(HfConfigPathOf(out.string()), (out / "config.json").string());
  // Naming the weights file instead of the directory keeps its config.json
  // (a Llama-3.1 rope_scaling in it was dropped that way before).
  EXPECT_EQ(HfConfigPathOf((out / "model.safetensors").string()), (out / "config.json").string());
  EXPECT_EQ(HfConfigPathOf((out.parent_path() / "no_such_dir" / "model.safetensors").string()), "");
}

// A softmax-routed MoE with shared experts: no Hugging Face class computes it.
TEST_F(WeightsIoTest, AnMoeNoClassComputesIsNotExported) {
  ModelConfig moe = TinyModel();
  moe.mutable_moe()->set_n_routed_experts(4);
  moe.mutable_moe()->set_num_experts_per_tok(2);
  moe.mutable_moe()->set_moe_intermediate_size(4);
  moe.mutable_moe()->set_n_shared_experts(1);
  moe.mutable_moe()->set_scoring_func("softmax");
  LanguageModel model(moe, 1);
  SelfCommunicator self;
  const std::string out = (dir_ / "softmax").string();
  const absl::Status status =
      ExportWeights(out, model.parameters(), moe, 16, DType::kF32, self, true);
  EXPECT_THAT(Message(status), HasSubstr("MixtralForCausalLM"));
  EXPECT_FALSE(fs::exists(out));  // nothing written
}

}  // namespace
}  // namespace tetra
