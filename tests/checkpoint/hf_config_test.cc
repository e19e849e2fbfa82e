#include "checkpoint/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_dims.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::UserErrorShape;

// Llama-3.1-8B's config.json as Meta published it (keys and values).
constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = testing::ScratchDir("hf_config_test") + "/" + name + ".json";
  testing::WriteBytes(path, text);
  return path;
}

// kLlama31 with `key` replaced by `value` (JSON text), or removed when empty.
std::string Edited(const std::string& key, const std::string& value) {
  JsonValue root = *ParseJson(kLlama31);
  std::string out = "{";
  bool replaced = false;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    std::string item;
    if (root.keys[i] == key) {
      replaced = true;
      if (value.empty()) continue;
      item = value;
    } else {
      // Re-serialise by hand: the test values are scalars, lists of ids and one object.
      const JsonValue& v = root.items[i];
      if (v.kind == JsonValue::Kind::kString) AppendJsonString(v.string, &item);
      if (v.kind == JsonValue::Kind::kBool) item = v.boolean ? "true" : "false";
      if (v.kind == JsonValue::Kind::kNumber)
        item = v.integer ? std::to_string(*v.integer) : std::to_string(v.number);
      if (v.kind == JsonValue::Kind::kArray && root.keys[i] == "architectures")
        item = "[\"LlamaForCausalLM\"]";
      if (v.kind == JsonValue::Kind::kArray && root.keys[i] == "eos_token_id")
        item = "[128001, 128008, 128009]";
      if (v.kind == JsonValue::Kind::kObject) {
        item = R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"})";
      }
    }
    if (out.size() > 1) out += ", ";
    AppendJsonString(root.keys[i], &out);
    out += ": " + item;
  }
  if (!replaced && !value.empty()) {
    out += ", ";
    AppendJsonString(key, &out);
    out += ": " + value;
  }
  return out + "}";
}

TEST(HfConfigTest, ReadsLlama31) {
  absl::StatusOr<ModelConfig> m = ReadHfConfigJson(WriteConfig("llama31", kLlama31));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->vocab_size(), 128256);
  EXPECT_EQ(m->hidden_size(), 4096);
  EXPECT_EQ(m->intermediate_size(), 14336);
  EXPECT_EQ(m->num_hidden_layers(), 32);
  EXPECT_EQ(m->num_attention_heads(), 32);
  EXPECT_EQ(m->num_key_value_heads(), 8);
  EXPECT_EQ(m->rms_norm_eps(), 1e-5);
  EXPECT_EQ(m->rope_theta(), 500000.0);
  EXPECT_FALSE(m->tie_word_embeddings());
  EXPECT_EQ(m->max_position_embeddings(), 131072);
  EXPECT_EQ(m->rope_scaling().rope_type(), "llama3");
  EXPECT_EQ(m->rope_scaling().factor(), 8.0);
  EXPECT_EQ(m->rope_scaling().low_freq_factor(), 1.0);
  EXPECT_EQ(m->rope_scaling().high_freq_factor(), 4.0);
  EXPECT_EQ(m->rope_scaling().original_max_position_embeddings(), 8192);
  EXPECT_EQ(m->bos_token_id(), 128000);
  EXPECT_THAT(m->eos_token_id(), ::testing::ElementsAre(128001, 128008, 128009));
}

TEST(HfConfigTest, AbsentKeysTakeLlamaConfigDefaults) {
  absl::StatusOr<ModelConfig> m =
      ReadHfConfigJson(WriteConfig("minimal", R"({"model_type": "llama"})"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->vocab_size(), 32000);
  EXPECT_EQ(m->hidden_size(), 4096);
  EXPECT_EQ(m->num_key_value_heads(), 32);  // one per attention head
  EXPECT_EQ(m->rms_norm_eps(), 1e-6);       // LlamaConfig's, not tetra's 1e-5
  EXPECT_EQ(m->max_position_embeddings(), 2048);
  EXPECT_EQ(m->rope_scaling().rope_type(), "");
  EXPECT_EQ(m->bos_token_id(), 1);
  EXPECT_THAT(m->eos_token_id(), ::testing::ElementsAre(2));
}

struct Refused {
  std::string key, value, message;
};

TEST(HfConfigTest, WhatChangesTheMathAndIsNotImplementedIsAnError) {
  const Refused cases[] = {
      {"hidden_act", "\"gelu\"", "\"hidden_act\" is \"gelu\", but tetra's MLP is SwiGLU"},
      {"attention_bias", "true",
       "\"attention_bias\" is true, but it adds biases to all of q, k, v and o_proj"},
      {"mlp_bias", "true", "\"mlp_bias\" is true"},
      {"attention_dropout", "0.1",
       "\"attention_dropout\" is 0.1, but tetra trains without dropout"},
      {"head_dim", "63.5", "\"head_dim\" is 63.5, not an integer"},
      {"rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})",
       "\"rope_scaling.original_max_position_embeddings\" is missing, so transformers would take"},
      {"rope_scaling", R"({"rope_type": "yarn", "original_max_position_embeddings": 4096})",
       "\"rope_scaling.factor\" is missing"},
      {"rope_scaling",
       R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048})",
       "\"rope_scaling.factor\" is 32 but max_position_embeddings 131072 / "
       "original_max_position_embeddings 2048 "
       "is not"},
      {"rope_scaling",
       R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                         "attention_factor": 0.0})",
       "\"rope_scaling.attention_factor\" is 0"},
      {"rope_scaling",
       R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                         "low_freq_factor": 1.0})",
       "\"rope_scaling.low_freq_factor\" is not a setting tetra knows"},
      {"rope_scaling", R"({"type": "linear", "factor": 2.0})",
       "\"rope_scaling.rope_type\" is \"linear\""},
      {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0})",
       "\"rope_scaling.low_freq_factor\" is missing"},
      {"rope_scaling",
       R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "beta_fast": 32})",
       "\"rope_scaling.beta_fast\" is not a setting tetra knows"},
      {"model_type", "\"gpt2\"", "\"model_type\" is \"gpt2\""},
      {"model_type", "", "\"model_type\" is missing"},
      {"model_type", "\"deepseek_v3\"", "\"architectures\" is not [\"DeepseekV3ForCausalLM\"]"},
      {"architectures", "[\"LanguageModel\"]", "\"architectures\" is not [\"LlamaForCausalLM\"]"},
      {"quantization_config", R"({"quant_method": "fp8", "fmt": "e4m3"})",
       "\"quantization_config\" says the weights are stored quantized (\"fp8\"), but tetra trains "
       "from bf16 or "
       "fp32 weights"},
      {"rope_parameters", R"({"rope_type": "default", "rope_theta": 10000.0})",
       "\"rope_parameters\" changes what transformers computes"},
      {"hidden_size", "4096.5", "\"hidden_size\" is 4096.5, not an integer"},
      {"tie_word_embeddings", "1", "\"tie_word_embeddings\" is 1, not true or false"},
      {"eos_token_id", "\"x\"", "\"eos_token_id\" is not a token id"},
  };
  for (const Refused& c : cases) {
    const std::string path = WriteConfig("refused", Edited(c.key, c.value));
    absl::StatusOr<ModelConfig> m = ReadHfConfigJson(path);
    ASSERT_FALSE(m.ok()) << c.key << "=" << c.value;
    EXPECT_THAT(Message(m.status()), HasSubstr(c.message)) << c.key << "=" << c.value;
    EXPECT_THAT(Message(m.status()), HasSubstr(path));
    EXPECT_THAT(Message(m.status()), UserErrorShape());
  }
}

TEST(HfConfigTest, NoOpValuesAndMetadataAreAccepted) {
  for (const auto& [key, value] : {std::pair{"sliding_window", "null"},
                                   std::pair{"head_dim", "128"}, std::pair{"pretraining_tp", "2"},
                                   // Not LlamaConfig's: no Llama code reads it.
                                   std::pair{"sliding_window", "4096"},
                                   std::pair{"_name_or_path", "\"meta-llama/Llama-3.1-8B\""},
                                   std::pair{"rope_scaling", "null"},
                                   std::pair{"rope_scaling", R"({"rope_type": "default"})"}}) {
    absl::StatusOr<ModelConfig> m = ReadHfConfigJson(WriteConfig("accepted", Edited(key, value)));
    EXPECT_TRUE(m.ok()) << key << "=" << value << ": " << m.status();
  }
}

// Keys a model hub's config.json carries that no class's modelling code
// reads (they failed as unknown before): accepted, and named once.
TEST(HfConfigTest, KeysNoModellingCodeReadsAreMetadata) {
  std::string json = kLlama31;
  json.insert(json.find('{') + 1,
              R"("_name_or_path": "/models/llama", "unk_token_id": 0, "is_llama_config": true,
                 "rope_interleaved": false, "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16"}},
                 "auto_map": {"AutoConfig": "configuration.Config"}, "sep_token_id": null,)");
  ::testing::internal::CaptureStderr();
  absl::StatusOr<ModelConfig> m = ReadHfConfigJson(WriteConfig("hub", json));
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->hidden_size(), 4096);
  EXPECT_THAT(
      log, HasSubstr(
               "ignored 6 keys that change nothing transformers computes for LlamaForCausalLM: "
               "unk_token_id, is_llama_config, rope_interleaved, transformers.js_config, auto_map, "
               "sep_token_id"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
}

TEST(HfConfigTest, RecipeFieldsMustAgreeWithConfigJson) {
  const ModelConfig hf = *ReadHfConfigJson(WriteConfig("merge", kLlama31));
  ModelConfig recipe;
  recipe.set_hidden_size(4096);
  recipe.set_num_key_value_heads(8);
  recipe.mutable_rope_scaling()->set_rope_type("llama3");
  absl::StatusOr<ModelConfig> merged = MergeWithHfConfig(recipe, hf, "dir/config.json");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->vocab_size(), 128256);  // from config.json
  EXPECT_FALSE(merged->has_make_vocab_size_divisible_by());

  // The vocabulary's padding is tetra's own (config.json has none): the recipe's.
  recipe.set_make_vocab_size_divisible_by(64);
  merged = MergeWithHfConfig(recipe, hf, "dir/config.json");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->make_vocab_size_divisible_by(), 64);

  recipe.set_vocab_size(32000);
  merged = MergeWithHfConfig(recipe, hf, "dir/config.json");
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(Message(merged.status()),
              HasSubstr("model.vocab_size is 32000 in the recipe but 128256 in dir/config.json"));
  EXPECT_THAT(Message(merged.status()), UserErrorShape());

  ModelConfig scaled;
  scaled.mutable_rope_scaling()->set_factor(4);
  EXPECT_THAT(Message(MergeWithHfConfig(scaled, hf, "c.json").status()),
              HasSubstr("model.rope_scaling.factor is 4 in the recipe but 8 in c.json"));
  ModelConfig one_kv_per_head;
  one_kv_per_head.set_num_key_value_heads(0);  // means 32, config.json says 8
  EXPECT_THAT(Message(MergeWithHfConfig(one_kv_per_head, hf, "c.json").status()),
              HasSubstr("model.num_key_value_heads is 32 in the recipe but 8"));
  ModelConfig moe;
  moe.mutable_moe()->set_n_routed_experts(8);
  EXPECT_THAT(Message(MergeWithHfConfig(moe, hf, "c.json").status()),
              HasSubstr("mixture of experts"));
}

TEST(HfConfigTest, ExportWritesWhatItReads) {
  const ModelConfig hf = *ReadHfConfigJson(WriteConfig("roundtrip", kLlama31));
  const std::string written = HfConfigJson(hf, /*seq_length=*/2048, DType::kBF16);
  absl::StatusOr<ModelConfig> back = ReadHfConfigJson(WriteConfig("written", written));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << written;
  EXPECT_EQ(back->SerializeAsString(), hf.SerializeAsString());
  EXPECT_THAT(written, HasSubstr("\"max_position_embeddings\": 131072"));  // the model's, not 2048
  EXPECT_THAT(written, HasSubstr("\"torch_dtype\": \"bfloat16\""));
  const JsonValue generation = *ParseJson(HfGenerationConfigJson(hf));
  EXPECT_EQ(*generation.Find("bos_token_id")->integer, 128000);
  EXPECT_EQ(generation.Find("eos_token_id")->items.size(), 3u);
  EXPECT_EQ(HfGenerationConfigJson(ModelConfig()), "");  // no ids known: no file
}

// DeepSeek-V3's rope_scaling as its config.json spells it (the pre-4.43
// "type"), on a Llama whose max_position_embeddings it stretches to.
constexpr char kDeepSeekV3Yarn[] = R"({"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"})";

std::string WithYarn(const std::string& rope_scaling, const std::string& max_positions) {
  std::string text = Edited("rope_scaling", rope_scaling);
  const std::string from = "\"max_position_embeddings\": 131072";
  text.replace(text.find(from), from.size(), "\"max_position_embeddings\": " + max_positions);
  return text;
}

TEST(HfConfigTest, ReadsDeepSeekV3Yarn) {
  absl::StatusOr<ModelConfig> m =
      ReadHfConfigJson(WriteConfig("yarn", WithYarn(kDeepSeekV3Yarn, "163840")));
  ASSERT_TRUE(m.ok()) << m.status();
  const RopeScalingConfig& s = m->rope_scaling();
  EXPECT_EQ(s.rope_type(), "yarn");
  EXPECT_EQ(s.factor(), 40);
  EXPECT_EQ(s.original_max_position_embeddings(), 4096);
  EXPECT_EQ(s.beta_fast(), 32);
  EXPECT_EQ(s.beta_slow(), 1);
  EXPECT_EQ(s.mscale(), 1);
  EXPECT_EQ(s.mscale_all_dim(), 1);
  EXPECT_EQ(s.attention_factor(), 0);  // derived
  EXPECT_TRUE(s.truncate());
  EXPECT_EQ(m->max_position_embeddings(), 163840);

  // transformers reads an absent or 0 beta as YaRN's 32 and 1.
  m = ReadHfConfigJson(WriteConfig(
      "yarn_betas",
      WithYarn(R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                                 "beta_fast": 0})",
               "131072")));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->rope_scaling().beta_fast(), 32);
  EXPECT_EQ(m->rope_scaling().beta_slow(), 1);
}

TEST(HfConfigTest, ExportWritesYarnAsItReadsIt) {
  for (const auto& [rope_scaling, max_positions] :
       {std::pair{kDeepSeekV3Yarn, "163840"},
        std::pair{R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25, "truncate": false})",
                  "131072"}}) {
    const ModelConfig hf =
        *ReadHfConfigJson(WriteConfig("yarn_in", WithYarn(rope_scaling, max_positions)));
    const std::string written = HfConfigJson(hf, /*seq_length=*/2048, DType::kF32);
    absl::StatusOr<ModelConfig> back = ReadHfConfigJson(WriteConfig("yarn_out", written));
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << written;
    EXPECT_EQ(back->SerializeAsString(), hf.SerializeAsString()) << written;
  }
  // 0 is tetra's "absent": never written, since transformers would take it as a value.
  ModelConfig plain;
  plain.set_max_position_embeddings(8192);
  plain.mutable_rope_scaling()->set_rope_type("yarn");
  plain.mutable_rope_scaling()->set_factor(2);
  plain.mutable_rope_scaling()->set_original_max_position_embeddings(4096);
  const JsonValue root = *ParseJson(HfConfigJson(plain, 2048, DType::kF32));
  const JsonValue& written = *root.Find("rope_scaling");
  EXPECT_EQ(written.Find("rope_type")->string, "yarn");
  EXPECT_EQ(written.Find("factor")->number, 2);
  EXPECT_EQ(*written.Find("original_max_position_embeddings")->integer, 4096);
  EXPECT_EQ(written.Find("beta_fast")->number, 32);
  EXPECT_EQ(written.Find("beta_slow")->number, 1);
  for (const char* absent : {"mscale", "mscale_all_dim", "attention_factor", "truncate"}) {
    EXPECT_EQ(written.Find(absent), nullptr) << absent;
  }
}

// A tiny DeepseekV3ForCausalLM's config.json as transformers 4.57.6's
// save_pretrained wrote it (q_lora_rank None: a plain q_proj; YaRN; DeepSeek's
// num_nextn_predict_layers kept as an attribute).
constexpr char kDeepseekV3[] =
    R"({"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "bos_token_id": 0, "dtype": "float32", "eos_token_id": 1, "first_k_dense_replace": 1,
  "head_dim": 4, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 48,
  "kv_lora_rank": 16, "max_position_embeddings": 64, "model_type": "deepseek_v3", "moe_intermediate_size": 16,
  "n_group": 2, "n_routed_experts": 4, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 4,
  "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 4, "num_nextn_predict_layers": 1,
  "pretraining_tp": 1, "q_lora_rank": null, "qk_head_dim": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
  "rms_norm_eps": 1e-06, "rope_interleave": true, "rope_scaling": {"factor": 4.0, "mscale": 1.0,
  "mscale_all_dim": 1.0, "original_max_position_embeddings": 16, "rope_type": "yarn"}, "rope_theta": 10000.0,
  "routed_scaling_factor": 2.5, "tie_word_embeddings": false, "topk_group": 1, "transformers_version": "4.57.6",
  "use_cache": true, "v_head_dim": 8, "vocab_size": 64})";

// A tiny Glm4MoeForCausalLM's, with what tetra computes: every head dim
// rotated, no query/key norms.
constexpr char kGlm4Moe[] = R"({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
  "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "partial_rotary_factor": 1.0, "use_qk_norm": false,
  "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "rope_scaling": null, "tie_word_embeddings": false, "attention_bias": false, "attention_dropout": 0.0,
  "initializer_range": 0.02, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
  "moe_intermediate_size": 16, "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
  "n_group": 2, "topk_group": 1, "dtype": "float32", "transformers_version": "4.57.6", "use_cache": true})";

TEST(HfConfigTest, ReadsDeepseekV3AsTransformersSavesIt) {
  absl::StatusOr<ModelConfig> m = ReadHfConfigJson(WriteConfig("deepseek_v3", kDeepseekV3));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kv_lora_rank(), 16);
  EXPECT_EQ(m->q_lora_rank(), 0);  // null: a plain q_proj
  EXPECT_EQ(m->qk_nope_head_dim(), 8);
  EXPECT_EQ(m->qk_rope_head_dim(), 4);
  EXPECT_EQ(m->v_head_dim(), 8);
  EXPECT_TRUE(m->rope_interleave());
  EXPECT_FALSE(m->has_num_key_value_heads());  // unused by MLA
  EXPECT_EQ(m->num_nextn_predict_layers(), 1);
  EXPECT_EQ(m->rope_scaling().rope_type(), "yarn");
  EXPECT_EQ(m->max_position_embeddings(), 64);
  EXPECT_EQ(m->rms_norm_eps(), 1e-6);
  EXPECT_EQ(m->bos_token_id(), 0);
  EXPECT_THAT(m->eos_token_id(), ::testing::ElementsAre(1));
  const MoeConfig& moe = m->moe();
  EXPECT_EQ(moe.n_routed_experts(), 4);
  EXPECT_EQ(moe.num_experts_per_tok(), 2);
  EXPECT_EQ(moe.n_shared_experts(), 1);
  EXPECT_EQ(moe.moe_intermediate_size(), 16);
  EXPECT_EQ(moe.first_k_dense_replace(), 1);
  EXPECT_EQ(moe.n_group(), 2);
  EXPECT_EQ(moe.topk_group(), 1);
  EXPECT_EQ(moe.routed_scaling_factor(), 2.5);
  EXPECT_TRUE(moe.norm_topk_prob());
  EXPECT_EQ(moe.scoring_func(), "sigmoid");
}

TEST(HfConfigTest, AbsentKeysTakeEachClassDefaults) {
  absl::StatusOr<ModelConfig> v3 =
      ReadHfConfigJson(WriteConfig("v3_minimal", R"({"model_type": "deepseek_v3"})"));
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->vocab_size(), 129280);
  EXPECT_EQ(v3->num_hidden_layers(), 61);
  EXPECT_EQ(v3->q_lora_rank(), 1536);
  EXPECT_EQ(v3->kv_lora_rank(), 512);
  EXPECT_EQ(v3->qk_nope_head_dim(), 128);
  EXPECT_EQ(v3->moe().n_routed_experts(), 256);
  EXPECT_EQ(v3->moe().first_k_dense_replace(), 3);
  EXPECT_EQ(v3->moe().topk_group(), 4);
  EXPECT_EQ(v3->num_nextn_predict_layers(), 0);
  absl::StatusOr<ModelConfig> glm = ReadHfConfigJson(
      WriteConfig("glm_minimal", R"({"model_type": "glm4_moe", "partial_rotary_factor": 1.0})"));
  ASSERT_TRUE(glm.ok()) << glm.status();
  EXPECT_EQ(glm->num_key_value_heads(), 8);
  EXPECT_EQ(glm->rms_norm_eps(), 1e-5);
  EXPECT_EQ(glm->moe().n_routed_experts(), 128);
  EXPECT_EQ(glm->moe().moe_intermediate_size(), 1408);
  EXPECT_EQ(glm->bos_token_id(), -1);  // Glm4MoeConfig has none
  EXPECT_EQ(glm->eos_token_id_size(), 0);
}

// A class's config.json (`base`) with `from` replaced by `to`: read, it is
// refused with `message` (or, with no message, accepted).
struct EditedConfig {
  const char* base;
  std::string from, to, message;
};

void ExpectEditedConfigs(const std::vector<EditedConfig>& cases) {
  for (const EditedConfig& c : cases) {
    std::string text = c.base;
    ASSERT_NE(text.find(c.from), std::string::npos) << c.from;
    text.replace(text.find(c.from), c.from.size(), c.to);
    absl::StatusOr<ModelConfig> m = ReadHfConfigJson(WriteConfig("edited", text));
    if (c.message.empty()) {
      EXPECT_TRUE(m.ok()) << c.to << ": " << m.status();
      continue;
    }
    ASSERT_FALSE(m.ok()) << c.to;
    EXPECT_THAT(Message(m.status()), HasSubstr(c.message)) << c.to;
    EXPECT_THAT(Message(m.status()), UserErrorShape());
  }
}

// `text` read, written as `architecture` and read again: the same model.
void ExpectExportReadsBack(const std::string& text, const std::string& architecture) {
  const ModelConfig hf = *ReadHfConfigJson(WriteConfig("class_in", text));
  ASSERT_TRUE(CheckHfExportable(hf).ok()) << architecture;
  const std::string written = HfConfigJson(hf, /*seq_length=*/16, DType::kF32);
  EXPECT_EQ(ParseJson(written)->Find("architectures")->items[0].string, architecture);
  absl::StatusOr<ModelConfig> back = ReadHfConfigJson(WriteConfig("class_out", written));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << written;
  EXPECT_EQ(back->SerializeAsString(), hf.SerializeAsString()) << written;
}

TEST(HfConfigTest, WhatDeepseekV3AndGlm4MoeComputeOtherwiseIsAnError) {
  ExpectEditedConfigs({
      {kDeepseekV3, "\"head_dim\": 4", "\"head_dim\": 12",
       "\"head_dim\" is 12, but DeepseekV3's head_dim is"},
      {kDeepseekV3, "\"qk_head_dim\": 12", "\"qk_head_dim\": 16", "\"qk_head_dim\" is 16"},
      {kDeepseekV3, "\"use_cache\": true", "\"scoring_func\": \"softmax\"",
       "\"scoring_func\" is \"softmax\""},
      {kDeepseekV3, "\"use_cache\": true", "\"topk_method\": \"greedy\"",
       "\"topk_method\" is \"greedy\""},
      {kDeepseekV3, "\"use_cache\": true", "\"quantization_config\": {}",
       "\"quantization_config\" says the weights are stored quantized (an unnamed method)"},
      {kDeepseekV3, "\"q_lora_rank\": null", "\"q_lora_rank\": 1.5",
       "\"q_lora_rank\" is 1.5, not an integer"},
      {kGlm4Moe, "\"partial_rotary_factor\": 1.0, ", "", "\"partial_rotary_factor\" is missing"},
      {kGlm4Moe, "\"partial_rotary_factor\": 1.0", "\"partial_rotary_factor\": 0.5",
       "\"partial_rotary_factor\" is 0.5"},
      {kGlm4Moe, "\"use_qk_norm\": false", "\"use_qk_norm\": true", "\"use_qk_norm\" is true"},
      {kGlm4Moe, "\"head_dim\": 8", "\"head_dim\": 16", "\"head_dim\" is 16"},
  });
}

// Each class's config.json, read, written and read again: the same model;
// the export names the class that computes it.
TEST(HfConfigTest, ExportWritesDeepseekV3AndGlm4MoeAsItReadsThem) {
  for (const auto& [text, architecture] : {std::pair{kDeepseekV3, "DeepseekV3ForCausalLM"},
                                           std::pair{kGlm4Moe, "Glm4MoeForCausalLM"}}) {
    ExpectExportReadsBack(text, architecture);
  }
  // A query latent, and a dense MLA model: a DeepseekV3 with every layer dense.
  ModelConfig mla = *ReadHfConfigJson(WriteConfig("mla_in", kDeepseekV3));
  mla.set_q_lora_rank(24);
  mla.clear_moe();
  const std::string written = HfConfigJson(mla, 16, DType::kF32);
  const JsonValue root = *ParseJson(written);
  EXPECT_EQ(*root.Find("n_routed_experts")->integer, 0);
  EXPECT_EQ(*root.Find("first_k_dense_replace")->integer, 2);
  EXPECT_EQ(*root.Find("q_lora_rank")->integer, 24);
  absl::StatusOr<ModelConfig> back = ReadHfConfigJson(WriteConfig("mla_out", written));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), mla.SerializeAsString()) << written;
}

TEST(HfConfigTest, RecipeTrainingSettingsJoinAnMoeCheckpointsModel) {
  const ModelConfig hf = *ReadHfConfigJson(WriteConfig("moe_merge", kDeepseekV3));
  ModelConfig recipe;
  recipe.mutable_moe()->set_aux_loss_alpha(0.01);
  recipe.mutable_moe()->set_bias_update_speed(0.002);
  recipe.mutable_moe()->set_n_routed_experts(4);  // agrees
  absl::StatusOr<ModelConfig> merged = MergeWithHfConfig(recipe, hf, "c.json");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->moe().aux_loss_alpha(), 0.01);
  EXPECT_EQ(merged->moe().bias_update_speed(), 0.002);
  EXPECT_EQ(merged->moe().n_group(), 2);  // from config.json
  recipe.mutable_moe()->set_n_group(4);
  EXPECT_THAT(Message(MergeWithHfConfig(recipe, hf, "c.json").status()),
              HasSubstr("model.moe.n_group is 4 in the recipe but 2 in c.json"));
}

// A softmax-scored MoE exports as Mixtral (or with q/k norms Qwen3Moe); one
// no class computes (shared experts with a softmax router, a softmax router
// under a sigmoid class) is refused.
TEST(HfConfigTest, SoftmaxScoredMoeExportsAsMixtralOrQwen3Moe) {
  ModelConfig moe;
  moe.mutable_moe()->set_n_routed_experts(8);
  EXPECT_EQ(HfArchitecture(moe), "Glm4MoeForCausalLM");  // sigmoid, DeepSeek-V3's router
  moe.mutable_moe()->set_scoring_func("softmax");
  EXPECT_EQ(HfArchitecture(moe), "MixtralForCausalLM");
  EXPECT_TRUE(CheckHfExportable(moe).ok());
  moe.set_qk_norm(true);
  EXPECT_EQ(HfArchitecture(moe), "Qwen3MoeForCausalLM");
  moe.mutable_moe()->set_n_shared_experts(1);
  EXPECT_THAT(Message(CheckHfExportable(moe)), HasSubstr("model.moe's shared experts"));
  moe.mutable_moe()->set_n_shared_experts(0);
  moe.set_hf_architecture("Glm4MoeForCausalLM");
  moe.set_qk_norm(false);
  const absl::Status status = CheckHfExportable(moe);
  EXPECT_THAT(Message(status),
              HasSubstr("model.moe.scoring_func \"softmax\" (its router scores sigmoid)"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

constexpr char kQwen3Moe[] =
    R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 64, "head_dim": 16, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [0, 1], "output_router_logits": false,
    "router_aux_loss_coef": 0.001, "use_sliding_window": false, "sliding_window": null, "vocab_size": 128})";
constexpr char kMixtral[] = R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2, "output_router_logits": false,
    "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0, "sliding_window": null, "vocab_size": 128})";

TEST(HfConfigTest, ReadsQwen3MoeAndMixtral) {
  absl::StatusOr<ModelConfig> qwen = ReadHfConfigJson(WriteConfig("qwen3_moe", kQwen3Moe));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_TRUE(qwen->qk_norm());
  EXPECT_EQ(qwen->moe().n_routed_experts(), 8);
  EXPECT_EQ(qwen->moe().moe_intermediate_size(), 32);
  EXPECT_EQ(qwen->moe().first_k_dense_replace(), 2);  // mlp_only_layers [0, 1]
  EXPECT_EQ(qwen->moe().scoring_func(), "softmax");
  EXPECT_EQ(qwen->moe().n_shared_experts(), 0);
  EXPECT_EQ(qwen->moe().aux_loss_alpha(), 0);        // transformers trains without one here
  EXPECT_EQ(qwen->moe().router_aux_loss_coef(), 0);  // output_router_logits false: no balance loss
  std::string balanced = kQwen3Moe;
  balanced.replace(balanced.find("\"output_router_logits\": false"), 29,
                   "\"output_router_logits\": true");
  absl::StatusOr<ModelConfig> with_loss =
      ReadHfConfigJson(WriteConfig("qwen3_moe_balanced", balanced));
  ASSERT_TRUE(with_loss.ok()) << with_loss.status();
  EXPECT_EQ(with_loss->moe().router_aux_loss_coef(), 0.001);
  const std::string written = HfConfigJson(*with_loss, 16, DType::kF32);
  EXPECT_TRUE(ParseJson(written)->Find("output_router_logits")->boolean) << written;
  absl::StatusOr<ModelConfig> mixtral = ReadHfConfigJson(WriteConfig("mixtral", kMixtral));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(mixtral->moe().moe_intermediate_size(), 96);  // its experts' width is intermediate_size
  EXPECT_TRUE(mixtral->moe().norm_topk_prob());
  EXPECT_EQ(mixtral->moe().first_k_dense_replace(), 0);
  EXPECT_EQ(mixtral->rope_theta(), 1e6);  // MixtralConfig's default
  // Qwen3MoeConfig's default norm_topk_prob is false.
  absl::StatusOr<ModelConfig> minimal =
      ReadHfConfigJson(WriteConfig("q3m_minimal", R"({"model_type": "qwen3_moe"})"));
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  EXPECT_FALSE(minimal->moe().norm_topk_prob());
  EXPECT_EQ(minimal->moe().n_routed_experts(), 128);

  for (const auto& [text, architecture] :
       {std::pair{kQwen3Moe, "Qwen3MoeForCausalLM"}, std::pair{kMixtral, "MixtralForCausalLM"}}) {
    ExpectExportReadsBack(text, architecture);
  }
}

TEST(HfConfigTest, WhatQwen3MoeAndMixtralComputeOtherwiseIsAnError) {
  ExpectEditedConfigs({
      {kQwen3Moe, "\"output_router_logits\": false", "\"output_router_logits\": 1",
       "\"output_router_logits\" is 1, not true or false"},
      {kQwen3Moe, "\"mlp_only_layers\": [0, 1]", "\"mlp_only_layers\": [1]",
       "\"mlp_only_layers\" is not a first run of layers"},
      {kQwen3Moe, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2",
       "\"decoder_sparse_step\" is 2"},
      {kMixtral, "\"router_jitter_noise\": 0.0", "\"router_jitter_noise\": 0.1",
       "\"router_jitter_noise\" is 0.1"},
  });
}

// Llama's relatives as transformers 4.57 saves them (Qwen2, Qwen3 and
// Mistral configs' own keys), and what each class's defaults give absent keys.
constexpr char kQwen2[] =
    R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
    "vocab_size": 152064, "max_position_embeddings": 131072, "max_window_layers": 28, "sliding_window": 131072,
    "use_sliding_window": false, "use_mrope": false, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "layer_types": ["full_attention", "full_attention"], "bos_token_id": 151643, "eos_token_id": 151643})";
constexpr char kQwen3[] =
    R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
    "head_dim": 128, "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8,
    "num_hidden_layers": 28, "attention_bias": false, "sliding_window": null, "use_sliding_window": false,
    "tie_word_embeddings": true, "eos_token_id": 151645})";
constexpr char kMistral[] = R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
    "hidden_size": 5120, "head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 8,
    "sliding_window": null, "vocab_size": 131072})";

TEST(HfConfigTest, ReadsQwenAndMistral) {
  absl::StatusOr<ModelConfig> qwen2 = ReadHfConfigJson(WriteConfig("qwen2", kQwen2));
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_TRUE(qwen2->qkv_bias());
  EXPECT_FALSE(qwen2->qk_norm());
  EXPECT_EQ(qwen2->head_dim(), 0);        // 3584 / 28, as hidden / heads
  EXPECT_EQ(qwen2->sliding_window(), 0);  // use_sliding_window false
  EXPECT_EQ(qwen2->hf_architecture(), "Qwen2ForCausalLM");
  absl::StatusOr<ModelConfig> qwen3 = ReadHfConfigJson(WriteConfig("qwen3", kQwen3));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->qk_norm());
  EXPECT_FALSE(qwen3->qkv_bias());
  EXPECT_EQ(qwen3->head_dim(), 128);     // not 1024 / 16
  EXPECT_EQ(qwen3->bos_token_id(), -1);  // Qwen3Config has none
  absl::StatusOr<ModelConfig> mistral = ReadHfConfigJson(WriteConfig("mistral", kMistral));
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->head_dim(), 128);  // Mistral Nemo's: not 5120 / 32
  EXPECT_EQ(mistral->sliding_window(), 0);
  EXPECT_EQ(mistral->hf_architecture(), "MistralForCausalLM");

  // Absent keys: each class's defaults.
  absl::StatusOr<ModelConfig> q3 =
      ReadHfConfigJson(WriteConfig("q3_minimal", R"({"model_type": "qwen3"})"));
  ASSERT_TRUE(q3.ok()) << q3.status();
  EXPECT_EQ(HeadDim(*q3), 128);  // Qwen3Config's, here 4096 / 32 too
  EXPECT_EQ(q3->vocab_size(), 151936);
  EXPECT_EQ(q3->max_position_embeddings(), 32768);
  absl::StatusOr<ModelConfig> m7 =
      ReadHfConfigJson(WriteConfig("m_minimal", R"({"model_type": "mistral"})"));
  ASSERT_TRUE(m7.ok()) << m7.status();
  EXPECT_EQ(m7->sliding_window(), 4096);  // MistralConfig's default window
  EXPECT_EQ(m7->num_key_value_heads(), 8);
  EXPECT_EQ(m7->intermediate_size(), 14336);
}

TEST(HfConfigTest, WhatQwenAndMistralComputeOtherwiseIsAnError) {
  ExpectEditedConfigs({
      {kQwen2, "\"use_sliding_window\": false", "\"use_sliding_window\": true",
       "\"use_sliding_window\" is true, but tetra implements Qwen's full attention on every layer"},
      {kQwen2, "\"full_attention\"]", "\"sliding_attention\"]",
       "\"layer_types\" is not \"full_attention\" on every layer"},
      {kQwen3, "\"attention_bias\": false", "\"attention_bias\": true",
       "\"attention_bias\" is true"},
      {kMistral, "\"sliding_window\": null", "\"sliding_window\": 4.5",
       "\"sliding_window\" is 4.5"},
      {kMistral, "\"head_dim\": 128",
       "\"head_dim\": 128, \"attention_bias\": true, \"mlp_bias\": true",
       ""},  // keys MistralConfig and its code do not read: metadata
  });
}

TEST(HfConfigTest, ExportWritesQwenAndMistralAsItReadsThem) {
  std::string windowed = kMistral;
  windowed.replace(windowed.find("\"sliding_window\": null"), 22, "\"sliding_window\": 4096");
  for (const auto& [text, architecture] : {std::pair{std::string(kQwen2), "Qwen2ForCausalLM"},
                                           std::pair{std::string(kQwen3), "Qwen3ForCausalLM"},
                                           std::pair{std::string(kMistral), "MistralForCausalLM"},
                                           std::pair{windowed, "MistralForCausalLM"}}) {
    ExpectExportReadsBack(text, architecture);
  }
}

// A recipe's own model exports as the class its features call for, and a
// class named that does not compute the model is refused at launch.
TEST(HfConfigTest, ExportClassFollowsTheModelsFeatures) {
  ModelConfig m;
  EXPECT_EQ(HfArchitecture(m), "LlamaForCausalLM");
  m.set_qkv_bias(true);
  EXPECT_EQ(HfArchitecture(m), "Qwen2ForCausalLM");
  m.set_qkv_bias(false);
  m.set_qk_norm(true);
  EXPECT_EQ(HfArchitecture(m), "Qwen3ForCausalLM");
  m.set_hf_architecture("LlamaForCausalLM");
  EXPECT_THAT(Message(CheckHfExportable(m)),
              HasSubstr("this model's model.qk_norm (q/k head norms: Qwen3's and Qwen3Moe's alone) "
                        "is not what Hugging "
                        "Face's "
                        "LlamaForCausalLM, the class its export would name, computes"));
  m.set_hf_architecture("GPT2LMHeadModel");
  EXPECT_THAT(Message(CheckHfExportable(m)),
              HasSubstr("model.hf_architecture is \"GPT2LMHeadModel\""));
  // The hint names every class an export can be: the MoE ones too.
  for (const char* exported :
       {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
        "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"}) {
    EXPECT_THAT(Message(CheckHfExportable(m)), HasSubstr(exported));
  }
  ModelConfig windowed;
  windowed.set_sliding_window(4096);
  EXPECT_THAT(Message(CheckHfExportable(windowed)),
              HasSubstr("model.sliding_window (Mistral's and Mixtral's alone)"));
}

}  // namespace
}  // namespace tetra
