// Hugging Face's config.json and generation_config.json for the models tetra
// trains, read into and written from ModelConfig.
//
// Reading (the config.json of a LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM,
// DeepseekV3ForCausalLM or Glm4MoeForCausalLM, as `save_pretrained` writes
// it): every key is accounted for. A key either maps to a ModelConfig field
// (with its class's default when absent, since that is what transformers
// computes with), or must hold the value tetra implements (hidden_act
// "silu", attention_bias false, rope_scaling null, llama3 or yarn, ...), or is
// metadata that does not change the math (transformers_version,
// torch_dtype, ...). Any other key or value is an error naming it, so a
// checkpoint tetra would compute differently is never trained silently.
//
// Writing: the complete config.json of an export, in the class it was read
// from (model.hf_architecture) or else the class its features call for
// (ExportClass in hf_config.cc), and generation_config.json.
#ifndef TETRA_CHECKPOINT_HF_CONFIG_H_
#define TETRA_CHECKPOINT_HF_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/config.pb.h"

namespace tetra {

// The model section the config.json at `path` describes.
absl::StatusOr<ModelConfig> ReadHfConfigJson(const std::string& path);

// The model of a run whose init_from is a Hugging Face directory: `hf` (from
// its config.json at `path`), where every field `recipe` sets explicitly must
// agree with hf's value (an error names the field and both values), and a
// recipe field HF's class has no counterpart for (model.moe) is an error;
// model.make_vocab_size_divisible_by, tetra's layout, comes from the recipe.
absl::StatusOr<ModelConfig> MergeWithHfConfig(const ModelConfig& recipe, const ModelConfig& hf,
                                              const std::string& path);

// Whether `model` can be written under a Hugging Face class that computes
// what tetra computes; the error says why not.
absl::Status CheckHfExportable(const ModelConfig& model);

// The Hugging Face class an export of `model` names (e.g. "Qwen3ForCausalLM").
std::string HfArchitecture(const ModelConfig& model);

// config.json of an export of `model` with weights stored as `dtype`.
// max_position_embeddings is model's, else `seq_length`.
std::string HfConfigJson(const ModelConfig& model, int64_t seq_length, DType dtype);

// generation_config.json, or "" when model knows no special token ids.
std::string HfGenerationConfigJson(const ModelConfig& model);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_HF_CONFIG_H_
