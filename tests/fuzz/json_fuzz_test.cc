// Fuzzing ParseJson (tests/fuzz/json_target.h says what each input must
// satisfy) from the JSON tetra reads: a safetensors header as WriteSafetensors
// writes it and Hugging Face config.json, model.safetensors.index.json and
// generation_config.json texts.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/fuzz/json_target.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

std::vector<std::string> Corpus() {
  const std::string path = testing::ScratchDir("json_fuzz_test") + "/seed.safetensors";
  const std::vector<float> values(6, 1.0f);
  EXPECT_TRUE(WriteSafetensors(
                  path, {{"model.norm.weight", {2, 3}, values.data()}, {"s", {}, values.data()}},
                  DType::kBF16, {{"format", "pt"}})
                  .ok());
  const std::string file = testing::ReadBytes(path);
  uint64_t header_size = 0;
  if (file.size() >= 8) std::memcpy(&header_size, file.data(), 8);
  return {
      file.substr(8, header_size),
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "rms_norm_eps": 1e-05,
 "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "rope_type": "llama3",
 "original_max_position_embeddings": 8192}, "tie_word_embeddings": false,
 "bos_token_id": 128000, "eos_token_id": [128001, 128009], "torch_dtype": "bfloat16",
 "sliding_window": null, "vocab_size": 128256, "max_position_embeddings": -1})",
      R"({"metadata": {"total_size": 16060522496}, "weight_map": {
 "lm_head.weight": "model-00004-of-00004.safetensors",
 "model.embed_tokens.weight": "model-00001-of-00004.safetensors",
 "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00004.safetensors"}})",
      R"({"_from_model_config": true, "do_sample": true, "temperature": 0.6, "top_p": 0.9,
 "transformers_version": "4.45.0.dev0", "note": "\u00e9\ud83d\ude00 tab\t \"q\" \\ \/"})",
  };
}

TEST(JsonFuzzTest, EveryInputParsesSoundOrFailsWithAShortMessage) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  testing::Run({.parser = "json",
                .corpus = Corpus(),
                .seed = 8259,
                .mutations = 50000,
                .problem = testing::JsonProblem});
}

// Deep nesting is refused, not a stack overflow.
TEST(JsonFuzzTest, DeepNestingIsAnError) {
  for (const std::string open : {"[", "{\"a\":"}) {
    std::string text;
    for (int i = 0; i < 100000; ++i) text += open;
    EXPECT_EQ(testing::JsonProblem(text), "");
    EXPECT_FALSE(ParseJson(text).ok());
  }
}

}  // namespace
}  // namespace tetra
