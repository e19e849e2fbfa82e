#include "checkpoint/hf_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/json.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "model/model_dims.h"

namespace tetra {
namespace {

constexpr char kReadHint[] =
    "tetra trains LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, "
    "Qwen3ForCausalLM, "
    "Qwen3MoeForCausalLM, DeepseekV3ForCausalLM and Glm4MoeForCausalLM checkpoints; give init_from "
    "a "
    "directory whose config.json describes one, or a .safetensors file with a model section in the "
    "recipe";

// Keys that change nothing tetra computes: bookkeeping, inference options and
// the padding id.
const std::set<std::string_view> kMetadataKeys = {
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_cache",
    "pad_token_id",
    "pretraining_tp",  // transformers splits the projections into slices: the same math
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "tokenizer_class",
    "task_specific_params",
    "_attn_implementation_autoset",
    "_from_model_config"};

// The shortest text that reads back as `value`.
std::string Number(double value) {
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, end);
  // JSON readers take 8 as an integer; HF writes floats with a point.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string Quoted(std::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

// Reads the keys of one config.json object, remembering which it has seen.
class HfConfigReader {
 public:
  HfConfigReader(const JsonValue& object, std::string path, std::string prefix = "")
      : object_(object), path_(std::move(path)), prefix_(std::move(prefix)) {}

  const JsonValue* Take(std::string_view key) {
    taken_.insert(std::string(key));
    const JsonValue* value = object_.Find(key);
    return value != nullptr && value->kind == JsonValue::Kind::kNull ? nullptr : value;
  }

  // Whether `key` is present and null (transformers' None).
  bool IsNull(std::string_view key) const {
    const JsonValue* value = object_.Find(key);
    return value != nullptr && value->kind == JsonValue::Kind::kNull;
  }

  absl::Status Error(std::string_view key, const std::string& problem,
                     const std::string& hint = kReadHint) const {
    return UserError(absl::StrCat(path_, ": ", Name(key), " ", problem), hint);
  }

  absl::StatusOr<int32_t> Int(std::string_view key, int32_t absent) {
    const JsonValue* v = Take(key);
    if (v == nullptr) return absent;
    if (v->kind != JsonValue::Kind::kNumber || !v->integer || *v->integer < 0 ||
        *v->integer > std::numeric_limits<int32_t>::max()) {
      return Error(key, absl::StrCat("is ", Describe(*v), ", not an integer in [0, 2^31)"));
    }
    return static_cast<int32_t>(*v->integer);
  }

  absl::StatusOr<double> Double(std::string_view key, double absent) {
    const JsonValue* v = Take(key);
    if (v == nullptr) return absent;
    if (v->kind != JsonValue::Kind::kNumber)
      return Error(key, absl::StrCat("is ", Describe(*v), ", not a number"));
    return v->number;
  }

  absl::StatusOr<bool> Bool(std::string_view key, bool absent) {
    const JsonValue* v = Take(key);
    if (v == nullptr) return absent;
    if (v->kind != JsonValue::Kind::kBool)
      return Error(key, absl::StrCat("is ", Describe(*v), ", not true or false"));
    return v->boolean;
  }

  absl::StatusOr<std::string> String(std::string_view key, std::string absent) {
    const JsonValue* v = Take(key);
    if (v == nullptr) return absent;
    if (v->kind != JsonValue::Kind::kString)
      return Error(key, absl::StrCat("is ", Describe(*v), ", not a string"));
    return v->string;
  }

  // `key` must be absent, null or `expected`: other values change the math.
  absl::Status Require(std::string_view key, const JsonValue& expected, const std::string& why) {
    const JsonValue* v = Take(key);
    if (v == nullptr || SameValue(*v, expected)) return absl::OkStatus();
    return Error(key, absl::StrCat("is ", Describe(*v), ", but ", why));
  }

  // Every key not taken nor metadata: tetra cannot tell what it does.
  absl::Status CheckAllKnown() const {
    for (const std::string& key : object_.keys) {
      if (taken_.count(key) || (prefix_.empty() && kMetadataKeys.count(key))) continue;
      return Error(
          key,
          "is not a setting tetra knows, so it cannot tell whether it changes the model's math",
          "if the key is only metadata, remove it from config.json");
    }
    return absl::OkStatus();
  }

  // The keys not taken: one that `architecture`'s modelling code reads
  // (`math_keys`) is an error, as tetra does not implement it; any other
  // cannot change what transformers computes, so it is metadata, returned.
  absl::StatusOr<std::vector<std::string>> Untaken(const std::set<std::string_view>& math_keys,
                                                   const char* architecture) const {
    std::vector<std::string> ignored;
    for (const std::string& key : object_.keys) {
      if (taken_.count(key) || kMetadataKeys.count(key)) continue;
      if (math_keys.count(key)) {
        return Error(
            key, absl::StrCat("changes what transformers computes for ", architecture,
                              " (its modelling code reads it), and tetra does not implement it"));
      }
      ignored.push_back(key);
    }
    return ignored;
  }

  static std::string Describe(const JsonValue& v) {
    switch (v.kind) {
      case JsonValue::Kind::kNull:
        return "null";
      case JsonValue::Kind::kBool:
        return v.boolean ? "true" : "false";
      case JsonValue::Kind::kNumber:
        return v.integer ? absl::StrCat(*v.integer) : Number(v.number);
      case JsonValue::Kind::kString:
        return UserText(v.string);
      case JsonValue::Kind::kArray:
      case JsonValue::Kind::kObject:
        return JsonKindName(v.kind);
    }
    return "?";
  }

 private:
  std::string Name(std::string_view key) const { return UserText(prefix_ + std::string(key)); }

  static bool SameValue(const JsonValue& a, const JsonValue& b) {
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case JsonValue::Kind::kBool:
        return a.boolean == b.boolean;
      case JsonValue::Kind::kNumber:
        return a.number == b.number;
      case JsonValue::Kind::kString:
        return a.string == b.string;
      default:
        return false;
    }
  }

  const JsonValue& object_;
  std::string path_, prefix_;
  std::set<std::string> taken_;
};

JsonValue JsonBool(bool b) {
  JsonValue v;
  v.kind = JsonValue::Kind::kBool;
  v.boolean = b;
  return v;
}
JsonValue JsonNumber(double x) {
  JsonValue v;
  v.kind = JsonValue::Kind::kNumber;
  v.number = x;
  return v;
}
JsonValue JsonString(std::string s) {
  JsonValue v;
  v.kind = JsonValue::Kind::kString;
  v.string = std::move(s);
  return v;
}

// rope_scaling of type yarn (`scaling`), as transformers' _compute_yarn_parameters
// reads it: factor required, beta_fast and beta_slow 32 and 1 when absent or
// 0, mscale and mscale_all_dim unset when absent or 0. tetra also requires
// original_max_position_embeddings, and max_position_embeddings (already in
// `model`) to be factor times it: transformers computes with their ratio
// where it differs from factor and warns that it uses factor, and takes
// max_position_embeddings itself for the original context where that is
// absent, so only then does the config mean one model.
absl::Status ReadYarn(HfConfigReader& scaling, ModelConfig* model) {
  RopeScalingConfig& s = *model->mutable_rope_scaling();
  s.set_rope_type("yarn");
  ASSIGN_OR_RETURN(const double factor, scaling.Double("factor", -1));
  ASSIGN_OR_RETURN(const int32_t original, scaling.Int("original_max_position_embeddings", 0));
  ASSIGN_OR_RETURN(const double beta_fast, scaling.Double("beta_fast", 0));
  ASSIGN_OR_RETURN(const double beta_slow, scaling.Double("beta_slow", 0));
  ASSIGN_OR_RETURN(const double mscale, scaling.Double("mscale", 0));
  ASSIGN_OR_RETURN(const double mscale_all_dim, scaling.Double("mscale_all_dim", 0));
  ASSIGN_OR_RETURN(const double attention_factor, scaling.Double("attention_factor", -1));
  ASSIGN_OR_RETURN(const bool truncate, scaling.Bool("truncate", true));
  if (factor < 0) return scaling.Error("factor", "is missing: yarn rope scaling needs it");
  if (original == 0) {
    return scaling.Error(
        "original_max_position_embeddings",
        "is missing, so transformers would take max_position_embeddings for the context before "
        "YaRN, while it usually holds the one after",
        "add original_max_position_embeddings (the context the model was trained on before "
        "YaRN) and set max_position_embeddings to factor times it");
  }
  if (model->max_position_embeddings() != factor * original) {
    return scaling.Error(
        "factor",
        absl::StrCat("is ", factor, " but max_position_embeddings ",
                     model->max_position_embeddings(), " / original_max_position_embeddings ",
                     original,
                     " is not: transformers computes YaRN with that ratio, yet "
                     "warns that it uses factor"),
        "set max_position_embeddings to factor times original_max_position_embeddings");
  }
  if (attention_factor == 0) {
    return scaling.Error("attention_factor", "is 0, which would zero every rotated query and key",
                         "remove it to derive it from factor, mscale and mscale_all_dim");
  }
  s.set_factor(factor);
  s.set_original_max_position_embeddings(original);
  s.set_beta_fast(beta_fast != 0 ? beta_fast : 32);
  s.set_beta_slow(beta_slow != 0 ? beta_slow : 1);
  s.set_mscale(mscale);
  s.set_mscale_all_dim(mscale_all_dim);
  s.set_attention_factor(attention_factor > 0 ? attention_factor : 0);
  s.set_truncate(truncate);
  return scaling.CheckAllKnown();
}

absl::Status ReadRopeScaling(HfConfigReader& config, const std::string& path, ModelConfig* model) {
  const JsonValue* value = config.Take("rope_scaling");
  if (value == nullptr) return absl::OkStatus();
  if (value->kind != JsonValue::Kind::kObject) {
    return config.Error("rope_scaling",
                        absl::StrCat("is ", HfConfigReader::Describe(*value), ", not an object"));
  }
  HfConfigReader scaling(*value, path, "rope_scaling.");
  // transformers reads "rope_type", and "type" from configs older than 4.43.
  ASSIGN_OR_RETURN(std::string type, scaling.String("rope_type", ""));
  ASSIGN_OR_RETURN(std::string old_type, scaling.String("type", ""));
  if (type.empty()) type = old_type;
  if (type == "default") return scaling.CheckAllKnown();
  if (type == "yarn") return ReadYarn(scaling, model);
  if (type != "llama3") {
    return scaling.Error("rope_type",
                         absl::StrCat("is ", UserText(type),
                                      ", which tetra does not implement "
                                      "(it implements \"llama3\", Llama 3.1's scaling, and "
                                      "\"yarn\", DeepSeek-V3's)"));
  }
  RopeScalingConfig& s = *model->mutable_rope_scaling();
  s.set_rope_type(type);
  ASSIGN_OR_RETURN(const double factor, scaling.Double("factor", -1));
  ASSIGN_OR_RETURN(const double low, scaling.Double("low_freq_factor", -1));
  ASSIGN_OR_RETURN(const double high, scaling.Double("high_freq_factor", -1));
  ASSIGN_OR_RETURN(const int32_t original, scaling.Int("original_max_position_embeddings", 0));
  // transformers requires all four for llama3.
  for (auto [key, missing] :
       {std::pair{"factor", factor < 0}, std::pair{"low_freq_factor", low < 0},
        std::pair{"high_freq_factor", high < 0},
        std::pair{"original_max_position_embeddings", original == 0}}) {
    if (missing)
      return scaling.Error(key,
                           "is missing: llama3 rope scaling needs factor, low_freq_factor, "
                           "high_freq_factor and original_max_position_embeddings");
  }
  s.set_factor(factor);
  s.set_low_freq_factor(low);
  s.set_high_freq_factor(high);
  s.set_original_max_position_embeddings(original);
  return scaling.CheckAllKnown();
}

}  // namespace

namespace {

// The Hugging Face classes tetra reads and writes, and the defaults their
// configs give absent keys (transformers 4.57). DeepseekV3ForCausalLM has
// multi-head latent attention (dense or MoE); Glm4MoeForCausalLM has
// Llama's grouped-query attention with DeepSeek-V3's router, experts and
// weight names (transformers' code for them is the same), so it holds a
// tetra MoE model without MLA.
// Mistral is Llama's math with a sliding window; Qwen2 adds biases to q, k
// and v; Qwen3 normalises each query and key head before RoPE. Mixtral and
// Qwen3Moe are Mistral and Qwen3 with softmax-routed experts (top-k of the
// softmax, renormalised: always for Mixtral, with norm_topk_prob for
// Qwen3Moe), no shared experts and no correction bias.
enum class HfClass { kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen3Moe, kDeepseekV3, kGlm4Moe };

// The classes whose attention is Mistral's (a sliding window) and Qwen3's
// (q/k head norms, Qwen's window keys).
bool MistralAttention(HfClass id) { return id == HfClass::kMistral || id == HfClass::kMixtral; }
bool Qwen3Attention(HfClass id) { return id == HfClass::kQwen3 || id == HfClass::kQwen3Moe; }

struct HfClassInfo {
  HfClass id;
  const char* model_type;
  const char* architecture;
  int32_t vocab, hidden, intermediate, layers, heads;
  int32_t kv_heads;  // 0: one per attention head
  double rms_norm_eps;
  int32_t max_positions, bos, eos;  // -1: none
  int32_t head_dim;                 // 0: hidden / heads
  double rope_theta;
};

constexpr HfClassInfo kHfClasses[] = {
    {HfClass::kLlama, "llama", "LlamaForCausalLM", 32000, 4096, 11008, 32, 32, 0, 1e-6, 2048, 1, 2,
     0, 1e4},
    {HfClass::kMistral, "mistral", "MistralForCausalLM", 32000, 4096, 14336, 32, 32, 8, 1e-6,
     131072, 1, 2, 0, 1e4},
    {HfClass::kQwen2, "qwen2", "Qwen2ForCausalLM", 151936, 4096, 22016, 32, 32, 32, 1e-6, 32768, -1,
     -1, 0, 1e4},
    {HfClass::kQwen3, "qwen3", "Qwen3ForCausalLM", 151936, 4096, 22016, 32, 32, 32, 1e-6, 32768, -1,
     -1, 128, 1e4},
    {HfClass::kMixtral, "mixtral", "MixtralForCausalLM", 32000, 4096, 14336, 32, 32, 8, 1e-5,
     131072, 1, 2, 0, 1e6},
    {HfClass::kQwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM", 151936, 2048, 6144, 24, 32, 4, 1e-6,
     32768, -1, -1, 0, 1e4},
    {HfClass::kDeepseekV3, "deepseek_v3", "DeepseekV3ForCausalLM", 129280, 7168, 18432, 61, 128, 0,
     1e-6, 4096, 0, 1, 0, 1e4},
    {HfClass::kGlm4Moe, "glm4_moe", "Glm4MoeForCausalLM", 151552, 4096, 10944, 46, 96, 8, 1e-5,
     131072, -1, -1, 0, 1e4},
};

// `base` with `added`: each class's keys extend those of a simpler class.
std::set<std::string_view>* Extended(const std::set<std::string_view>& base,
                                     std::initializer_list<std::string_view> added) {
  auto* keys = new std::set<std::string_view>(base);
  keys->insert(added);
  return keys;
}

// MathKeys of the dense classes (Llama's for any other class).
const std::set<std::string_view>& DenseMathKeys(HfClass id) {
  static const auto* const kLlama = new std::set<std::string_view>{
      "attention_bias", "attention_dropout", "head_dim", "hidden_act", "hidden_size",
      "initializer_range", "intermediate_size", "max_position_embeddings", "mlp_bias",
      "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "pad_token_id",
      "pretraining_tp", "rms_norm_eps", "rope_scaling", "rope_theta", "tie_word_embeddings",
      "vocab_size",
      // Every class's: weights stored quantized, transformers 5's RoPE section.
      "quantization_config", "rope_parameters"};
  // Mistral's, Qwen2's and Qwen3's attention: Llama's projections (Qwen2's
  // biases fixed in its code) with a sliding window, which Qwen applies on
  // the layers from max_window_layers on (layer_types) when use_sliding_window.
  static const auto* const kMistral = [] {
    auto* keys = new std::set<std::string_view>(*kLlama);
    for (std::string_view key : {"attention_bias", "mlp_bias", "pretraining_tp"}) keys->erase(key);
    keys->insert("sliding_window");
    return keys;
  }();
  static const auto* const kQwen2 =
      Extended(*kMistral, {"use_sliding_window", "max_window_layers", "layer_types"});
  static const auto* const kQwen3 = Extended(*kQwen2, {"attention_bias"});
  switch (id) {
    case HfClass::kMistral:
      return *kMistral;
    case HfClass::kQwen2:
      return *kQwen2;
    case HfClass::kQwen3:
      return *kQwen3;
    default:
      return *kLlama;
  }
}

// The config keys transformers' modelling code reads for each class (its
// modeling_*.py and PreTrainedModel's loading, transformers 4.57): the keys
// that can change what it computes. tetra takes each one it implements; one
// it does not take is refused. Every other key is metadata. The MoE classes'
// are a dense class's (DenseMathKeys) with their experts' and router's.
const std::set<std::string_view>& MathKeys(HfClass id) {
  static const auto* const kMixtral =
      Extended(DenseMathKeys(HfClass::kMistral),
               {"num_local_experts", "num_experts_per_tok", "output_router_logits",
                "router_aux_loss_coef", "router_jitter_noise"});
  static const auto* const kQwen3Moe = Extended(
      DenseMathKeys(HfClass::kQwen3),
      {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
       "decoder_sparse_step", "mlp_only_layers", "output_router_logits", "router_aux_loss_coef"});
  static const auto* const kMoe = Extended(
      DenseMathKeys(HfClass::kLlama),
      {"moe_intermediate_size", "n_shared_experts", "n_routed_experts", "routed_scaling_factor",
       "n_group", "topk_group", "num_experts_per_tok", "first_k_dense_replace", "norm_topk_prob"});
  static const auto* const kDeepseekV3 = Extended(
      *kMoe, {"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim",
              "qk_head_dim", "rope_interleave", "num_nextn_predict_layers",
              // DeepSeek's own remote code's router keys.
              "scoring_func", "topk_method", "moe_layer_freq", "seq_aux"});
  static const auto* const kGlm4Moe =
      Extended(*kMoe, {"partial_rotary_factor", "use_qk_norm", "num_nextn_predict_layers"});
  switch (id) {
    case HfClass::kLlama:
    case HfClass::kMistral:
    case HfClass::kQwen2:
    case HfClass::kQwen3:
      return DenseMathKeys(id);
    case HfClass::kMixtral:
      return *kMixtral;
    case HfClass::kQwen3Moe:
      return *kQwen3Moe;
    case HfClass::kDeepseekV3:
      return *kDeepseekV3;
    case HfClass::kGlm4Moe:
      return *kGlm4Moe;
  }
  return DenseMathKeys(HfClass::kLlama);
}

// MoeConfig's fields a class's config.json holds, with its defaults.
struct MoeDefaults {
  int32_t routed, per_token, shared, intermediate, first_dense, groups, top_groups;
  double scaling;
};
constexpr MoeDefaults kDeepseekV3Moe = {256, 8, 1, 2048, 3, 8, 4, 2.5};
constexpr MoeDefaults kGlm4MoeMoe = {128, 8, 1, 1408, 1, 1, 1, 1.0};

// The keys every class shares, with `cls`'s defaults.
absl::Status ReadCommonKeys(HfConfigReader& config, const HfClassInfo& cls, ModelConfig* m) {
  ASSIGN_OR_RETURN(const int32_t vocab, config.Int("vocab_size", cls.vocab));
  ASSIGN_OR_RETURN(const int32_t hidden, config.Int("hidden_size", cls.hidden));
  ASSIGN_OR_RETURN(const int32_t intermediate, config.Int("intermediate_size", cls.intermediate));
  ASSIGN_OR_RETURN(const int32_t layers, config.Int("num_hidden_layers", cls.layers));
  ASSIGN_OR_RETURN(const int32_t heads, config.Int("num_attention_heads", cls.heads));
  ASSIGN_OR_RETURN(const int32_t kv_heads,
                   config.Int("num_key_value_heads", cls.kv_heads > 0 ? cls.kv_heads : heads));
  ASSIGN_OR_RETURN(const double eps, config.Double("rms_norm_eps", cls.rms_norm_eps));
  ASSIGN_OR_RETURN(const double theta, config.Double("rope_theta", cls.rope_theta));
  ASSIGN_OR_RETURN(const bool tied, config.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const double init_range, config.Double("initializer_range", 0.02));
  ASSIGN_OR_RETURN(const int32_t max_positions,
                   config.Int("max_position_embeddings", cls.max_positions));
  ASSIGN_OR_RETURN(const int32_t depths, config.Int("num_nextn_predict_layers", 0));
  m->set_vocab_size(vocab);
  m->set_hidden_size(hidden);
  m->set_intermediate_size(intermediate);
  m->set_num_hidden_layers(layers);
  m->set_num_attention_heads(heads);
  m->set_num_key_value_heads(kv_heads);
  m->set_rms_norm_eps(eps);
  m->set_rope_theta(theta);
  m->set_tie_word_embeddings(tied);
  m->set_initializer_range(init_range);
  m->set_max_position_embeddings(max_positions);
  if (depths > 0) m->set_num_nextn_predict_layers(depths);
  if (config.IsNull("bos_token_id")) {
    config.Take("bos_token_id");
  } else {
    ASSIGN_OR_RETURN(const int32_t bos, config.Int("bos_token_id", cls.bos));
    if (bos >= 0) m->set_bos_token_id(bos);
  }
  // eos_token_id: one id or a list of them (Llama 3.1 stops on several).
  if (const JsonValue* eos = config.Take("eos_token_id")) {
    std::vector<const JsonValue*> ids;
    if (eos->kind == JsonValue::Kind::kArray) {
      for (const JsonValue& id : eos->items) ids.push_back(&id);
    } else {
      ids.push_back(eos);
    }
    for (const JsonValue* id : ids) {
      if (id->kind != JsonValue::Kind::kNumber || !id->integer || *id->integer < 0 ||
          *id->integer > std::numeric_limits<int32_t>::max()) {
        return config.Error("eos_token_id", "is not a token id or a list of them");
      }
      m->add_eos_token_id(static_cast<int32_t>(*id->integer));
    }
  } else if (cls.eos >= 0 && !config.IsNull("eos_token_id")) {
    m->add_eos_token_id(cls.eos);
  }
  RETURN_IF_ERROR(
      config.Require("hidden_act", JsonString("silu"), "tetra's MLP is SwiGLU (\"silu\")"));
  RETURN_IF_ERROR(
      config.Require("attention_dropout", JsonNumber(0), "tetra trains without dropout"));
  m->set_hf_architecture(cls.architecture);
  return absl::OkStatus();
}

// head_dim, with `cls`'s default (0: hidden / heads), kept in the model
// only where it differs from hidden / heads.
absl::Status ReadHeadDim(HfConfigReader& config, const HfClassInfo& cls, ModelConfig* m) {
  const int32_t heads = m->num_attention_heads();
  const int32_t even = heads > 0 && m->hidden_size() % heads == 0 ? m->hidden_size() / heads : 0;
  if (config.IsNull("head_dim")) config.Take("head_dim");
  ASSIGN_OR_RETURN(const int32_t head_dim,
                   config.Int("head_dim", cls.head_dim > 0 ? cls.head_dim : even));
  if (head_dim != even) m->set_head_dim(head_dim);
  return absl::OkStatus();
}

// The attention of Llama's family: Llama's and Qwen3's projections have no
// biases unless attention_bias (then o_proj's too, which tetra lacks);
// Mistral's never, Qwen2's q, k and v always (neither reads the key); Qwen3
// normalises q and k heads. A
// window (Mistral's sliding_window, absent 4096; Qwen's when
// use_sliding_window) is kept for the launch's check against the sequence.
absl::Status ReadLlamaFamilyKeys(HfConfigReader& config, const HfClassInfo& cls, ModelConfig* m) {
  RETURN_IF_ERROR(ReadHeadDim(config, cls, m));
  if (cls.id == HfClass::kLlama || Qwen3Attention(cls.id)) {
    RETURN_IF_ERROR(
        config.Require("attention_bias", JsonBool(false),
                       "it adds biases to all of q, k, v and o_proj, and tetra's o_proj has none"));
  }
  m->set_qkv_bias(cls.id == HfClass::kQwen2);
  m->set_qk_norm(Qwen3Attention(cls.id));
  switch (cls.id) {
    case HfClass::kLlama:
      RETURN_IF_ERROR(
          config.Require("mlp_bias", JsonBool(false), "tetra's projections have no bias"));
      break;
    case HfClass::kMistral:
    case HfClass::kMixtral: {
      int32_t window = 0;
      if (config.IsNull("sliding_window")) {
        config.Take("sliding_window");
      } else {
        ASSIGN_OR_RETURN(window, config.Int("sliding_window", 4096));
      }
      m->set_sliding_window(window);
      break;
    }
    default: {
      constexpr char kFull[] = "tetra implements Qwen's full attention on every layer";
      RETURN_IF_ERROR(config.Require("use_sliding_window", JsonBool(false), kFull));
      // Read only with use_sliding_window.
      for (const char* key : {"sliding_window", "max_window_layers"}) config.Take(key);
      if (const JsonValue* types = config.Take("layer_types")) {
        const bool all_full =
            types->kind == JsonValue::Kind::kArray &&
            std::all_of(types->items.begin(), types->items.end(), [](const JsonValue& t) {
              return t.kind == JsonValue::Kind::kString && t.string == "full_attention";
            });
        if (!all_full) {
          return config.Error("layer_types",
                              absl::StrCat("is not \"full_attention\" on every layer, ", kFull));
        }
      }
    }
  }
  return absl::OkStatus();
}

// DeepSeek-V3's mixture-of-experts keys (DeepseekV3Config's and
// Glm4MoeConfig's names), with `d` for absent ones; n_routed_experts 0: a
// dense model. Both classes score experts with sigmoid.
absl::Status ReadMoeKeys(HfConfigReader& config, const MoeDefaults& d, ModelConfig* m) {
  ASSIGN_OR_RETURN(const int32_t routed, config.Int("n_routed_experts", d.routed));
  ASSIGN_OR_RETURN(const int32_t per_token, config.Int("num_experts_per_tok", d.per_token));
  ASSIGN_OR_RETURN(const int32_t shared, config.Int("n_shared_experts", d.shared));
  ASSIGN_OR_RETURN(const int32_t intermediate, config.Int("moe_intermediate_size", d.intermediate));
  ASSIGN_OR_RETURN(const int32_t first_dense, config.Int("first_k_dense_replace", d.first_dense));
  ASSIGN_OR_RETURN(const int32_t groups, config.Int("n_group", d.groups));
  ASSIGN_OR_RETURN(const int32_t top_groups, config.Int("topk_group", d.top_groups));
  ASSIGN_OR_RETURN(const double scaling, config.Double("routed_scaling_factor", d.scaling));
  ASSIGN_OR_RETURN(const bool norm_topk, config.Bool("norm_topk_prob", true));
  if (routed == 0) return absl::OkStatus();
  MoeConfig& moe = *m->mutable_moe();
  moe.set_n_routed_experts(routed);
  moe.set_num_experts_per_tok(per_token);
  moe.set_n_shared_experts(shared);
  moe.set_moe_intermediate_size(intermediate);
  moe.set_first_k_dense_replace(first_dense);
  moe.set_n_group(groups);
  moe.set_topk_group(top_groups);
  moe.set_routed_scaling_factor(scaling);
  moe.set_norm_topk_prob(norm_topk);
  return absl::OkStatus();
}

// The experts of Mixtral (num_local_experts of intermediate_size, every
// layer) and Qwen3Moe (num_experts of moe_intermediate_size, dense MLPs on
// the layers mlp_only_layers lists, which tetra takes as a first run of
// layers, with decoder_sparse_step 1): softmax-scored, no shared experts.
// transformers adds its balance loss (summed over all layers' routers,
// router_aux_loss_coef of it) only with output_router_logits: tetra's
// model.moe.router_aux_loss_coef, 0 without. DeepSeek-V3's sequence-wise one
// (model.moe.aux_loss_alpha) is 0, as transformers trains.
absl::Status ReadSoftmaxMoeKeys(HfConfigReader& config, HfClass id, ModelConfig* m) {
  const bool mixtral = id == HfClass::kMixtral;
  ASSIGN_OR_RETURN(const int32_t experts,
                   config.Int(mixtral ? "num_local_experts" : "num_experts", mixtral ? 8 : 128));
  ASSIGN_OR_RETURN(const int32_t per_token, config.Int("num_experts_per_tok", mixtral ? 2 : 8));
  ASSIGN_OR_RETURN(const int32_t width, mixtral ? absl::StatusOr<int32_t>(m->intermediate_size())
                                                : config.Int("moe_intermediate_size", 768));
  ASSIGN_OR_RETURN(const bool norm_topk,
                   mixtral ? absl::StatusOr<bool>(true) : config.Bool("norm_topk_prob", false));
  int32_t dense_layers = 0;
  if (!mixtral) {
    RETURN_IF_ERROR(
        config.Require("decoder_sparse_step", JsonNumber(1),
                       "tetra's MoE layers run from the first after the dense ones to the last"));
    if (const JsonValue* only = config.Take("mlp_only_layers")) {
      bool prefix = only->kind == JsonValue::Kind::kArray;
      for (size_t i = 0; prefix && i < only->items.size(); ++i) {
        prefix = only->items[i].integer && *only->items[i].integer == static_cast<int64_t>(i);
      }
      if (!prefix) {
        return config.Error("mlp_only_layers",
                            "is not a first run of layers [0, 1, ..., d - 1], but tetra's "
                            "dense layers are the first ones");
      }
      dense_layers = static_cast<int32_t>(only->items.size());
    }
  } else {
    RETURN_IF_ERROR(config.Require("router_jitter_noise", JsonNumber(0),
                                   "tetra's router reads its input as it is"));
  }
  ASSIGN_OR_RETURN(const bool balance, config.Bool("output_router_logits", false));
  ASSIGN_OR_RETURN(const double coef, config.Double("router_aux_loss_coef", 0.001));
  if (experts == 0) return absl::OkStatus();
  MoeConfig& moe = *m->mutable_moe();
  moe.set_n_routed_experts(experts);
  moe.set_num_experts_per_tok(per_token);
  moe.set_n_shared_experts(0);
  moe.set_moe_intermediate_size(width);
  moe.set_first_k_dense_replace(dense_layers);
  moe.set_scoring_func("softmax");
  moe.set_norm_topk_prob(norm_topk);
  moe.set_routed_scaling_factor(1);
  moe.set_n_group(1);
  moe.set_topk_group(1);
  moe.set_aux_loss_alpha(0);
  moe.set_bias_update_speed(0);
  moe.set_router_aux_loss_coef(balance ? coef : 0);
  return absl::OkStatus();
}

// DeepseekV3Config's attention: multi-head latent attention, its derived
// head_dim (the rotary dims) and qk_head_dim, and the keys DeepSeek's own
// config.json (its remote code) adds for the router.
absl::Status ReadDeepseekV3Keys(HfConfigReader& config, ModelConfig* m) {
  // MLA has no key-value heads: num_key_value_heads is unused.
  m->clear_num_key_value_heads();
  ASSIGN_OR_RETURN(const int32_t kv_rank, config.Int("kv_lora_rank", 512));
  // null: a plain q_proj.
  int32_t q_rank = 0;
  if (config.IsNull("q_lora_rank")) {
    config.Take("q_lora_rank");
  } else {
    ASSIGN_OR_RETURN(q_rank, config.Int("q_lora_rank", 1536));
  }
  ASSIGN_OR_RETURN(const int32_t rope, config.Int("qk_rope_head_dim", 64));
  ASSIGN_OR_RETURN(const int32_t nope, config.Int("qk_nope_head_dim", 128));
  ASSIGN_OR_RETURN(const int32_t v_dim, config.Int("v_head_dim", 128));
  ASSIGN_OR_RETURN(const bool interleave, config.Bool("rope_interleave", true));
  m->set_kv_lora_rank(kv_rank);
  m->set_q_lora_rank(q_rank);
  m->set_qk_rope_head_dim(rope);
  m->set_qk_nope_head_dim(nope);
  m->set_v_head_dim(v_dim);
  m->set_rope_interleave(interleave);
  RETURN_IF_ERROR(
      config.Require("head_dim", JsonNumber(rope), "DeepseekV3's head_dim is qk_rope_head_dim"));
  RETURN_IF_ERROR(
      config.Require("qk_head_dim", JsonNumber(nope + rope),
                     "DeepseekV3's qk_head_dim is qk_nope_head_dim + qk_rope_head_dim"));
  RETURN_IF_ERROR(ReadMoeKeys(config, kDeepseekV3Moe, m));
  constexpr char kRouter[] =
      "DeepseekV3ForCausalLM's router is sigmoid-scored, group-limited (noaux_tc) on every "
      "layer from first_k_dense_replace on";
  RETURN_IF_ERROR(config.Require("scoring_func", JsonString("sigmoid"), kRouter));
  RETURN_IF_ERROR(config.Require("topk_method", JsonString("noaux_tc"), kRouter));
  RETURN_IF_ERROR(config.Require("moe_layer_freq", JsonNumber(1), kRouter));
  RETURN_IF_ERROR(
      config.Require("seq_aux", JsonBool(true), "tetra's balance loss is sequence-wise"));
  RETURN_IF_ERROR(
      config.Require("attention_bias", JsonBool(false), "tetra's MLA projections have no bias"));
  // Training and launch settings of DeepSeek's remote code, not the model's
  // math: tetra takes them from the recipe (model.moe.aux_loss_alpha,
  // parallel.expert).
  for (const char* key : {"aux_loss_alpha", "ep_size", "auto_map"}) config.Take(key);
  return absl::OkStatus();
}

// Glm4MoeConfig's attention is Llama's with all head dims rotated
// (partial_rotary_factor 1) and no query/key norms.
absl::Status ReadGlm4MoeKeys(HfConfigReader& config, ModelConfig* m) {
  if (m->num_attention_heads() > 0 && m->hidden_size() % m->num_attention_heads() == 0) {
    RETURN_IF_ERROR(config.Require("head_dim",
                                   JsonNumber(m->hidden_size() / m->num_attention_heads()),
                                   "tetra's head_dim is hidden_size / num_attention_heads"));
  }
  // Absent, Glm4MoeConfig's default rotates half the head dims.
  if (config.Take("partial_rotary_factor") == nullptr) {
    return config.Error("partial_rotary_factor",
                        "is missing, so transformers would rotate half of each head's dims "
                        "(Glm4MoeConfig's default 0.5), but tetra rotates all of them");
  }
  RETURN_IF_ERROR(
      config.Require("partial_rotary_factor", JsonNumber(1), "tetra rotates every head dim"));
  RETURN_IF_ERROR(
      config.Require("use_qk_norm", JsonBool(false), "tetra's attention has no query/key norms"));
  RETURN_IF_ERROR(
      config.Require("attention_bias", JsonBool(false), "tetra's projections have no bias"));
  return ReadMoeKeys(config, kGlm4MoeMoe, m);
}

// The class model_type names, which architectures (when present) must name too.
absl::StatusOr<const HfClassInfo*> ReadHfClass(HfConfigReader& config) {
  ASSIGN_OR_RETURN(const std::string model_type, config.String("model_type", ""));
  const HfClassInfo* cls = nullptr;
  for (const HfClassInfo& c : kHfClasses) {
    if (model_type == c.model_type) cls = &c;
  }
  if (cls == nullptr) {
    return config.Error("model_type",
                        absl::StrCat("is ", model_type.empty() ? "missing" : UserText(model_type),
                                     ", but tetra reads \"llama\", \"mistral\", \"mixtral\", "
                                     "\"qwen2\", \"qwen3\", \"qwen3_moe\", \"deepseek_v3\" and "
                                     "\"glm4_moe\" checkpoints"));
  }
  if (const JsonValue* architectures = config.Take("architectures")) {
    const bool causal_lm = architectures->kind == JsonValue::Kind::kArray &&
                           architectures->items.size() == 1 &&
                           architectures->items[0].kind == JsonValue::Kind::kString &&
                           architectures->items[0].string == cls->architecture;
    if (!causal_lm)
      return config.Error("architectures", absl::StrCat("is not [\"", cls->architecture, "\"]"));
  }
  return cls;
}

// The keys of `cls`'s own attention and experts, beside the common ones.
absl::Status ReadClassKeys(HfConfigReader& config, const HfClassInfo& cls, ModelConfig* m) {
  switch (cls.id) {
    case HfClass::kLlama:
    case HfClass::kMistral:
    case HfClass::kQwen2:
    case HfClass::kQwen3:
      return ReadLlamaFamilyKeys(config, cls, m);
    case HfClass::kMixtral:
    case HfClass::kQwen3Moe:
      RETURN_IF_ERROR(ReadLlamaFamilyKeys(config, cls, m));
      return ReadSoftmaxMoeKeys(config, cls.id, m);
    case HfClass::kDeepseekV3:
      return ReadDeepseekV3Keys(config, m);
    case HfClass::kGlm4Moe:
      return ReadGlm4MoeKeys(config, m);
  }
  return absl::OkStatus();
}

// tetra trains from unquantized weights: quantization_config is refused.
absl::Status RefuseQuantization(HfConfigReader& config) {
  const JsonValue* quantization = config.Take("quantization_config");
  if (quantization == nullptr) return absl::OkStatus();
  const JsonValue* method = quantization->Find("quant_method");
  return config.Error(
      "quantization_config",
      absl::StrCat("says the weights are stored quantized (",
                   method != nullptr ? HfConfigReader::Describe(*method) : "an unnamed method",
                   "), but tetra trains from bf16 or fp32 weights"),
      "convert the checkpoint to bf16 first (for DeepSeek-V3's fp8 weights, its "
      "inference/fp8_cast_bf16.py), drop quantization_config, and give init_from that directory");
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfConfigJson(const std::string& path) {
  constexpr char kFileHint[] = "config.json must be the file Hugging Face's save_pretrained writes";
  ASSIGN_OR_RETURN(const JsonValue root, ReadJsonFile(path, size_t{16} << 20, kFileHint));
  if (root.kind != JsonValue::Kind::kObject) {
    return UserError(absl::StrCat(path, " holds ", JsonKindName(root.kind), ", not a JSON object"),
                     kFileHint);
  }
  HfConfigReader config(root, path);
  ASSIGN_OR_RETURN(const HfClassInfo* cls, ReadHfClass(config));
  ModelConfig m;
  RETURN_IF_ERROR(ReadCommonKeys(config, *cls, &m));
  RETURN_IF_ERROR(ReadClassKeys(config, *cls, &m));
  RETURN_IF_ERROR(ReadRopeScaling(config, path, &m));
  RETURN_IF_ERROR(RefuseQuantization(config));
  ASSIGN_OR_RETURN(const std::vector<std::string> ignored,
                   config.Untaken(MathKeys(cls->id), cls->architecture));
  if (!ignored.empty()) {
    TETRA_LOG() << path << ": ignored " << ignored.size() << " key"
                << (ignored.size() == 1 ? "" : "s")
                << " that change nothing transformers computes for " << cls->architecture << ": "
                << absl::StrJoin(ignored, ", ");
  }
  return m;
}

namespace {

// The first field set in `recipe` (recursing into set messages) whose value
// differs from `hf`'s, as "model.x is A in the recipe but B in PATH".
std::string FirstDisagreement(const google::protobuf::Message& recipe,
                              const google::protobuf::Message& hf, const std::string& prefix,
                              const std::string& path) {
  std::vector<const google::protobuf::FieldDescriptor*> set;
  recipe.GetReflection()->ListFields(recipe, &set);
  for (const google::protobuf::FieldDescriptor* field : set) {
    const std::string name = prefix + field->name();
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE &&
        !field->is_repeated()) {
      const std::string inner =
          FirstDisagreement(recipe.GetReflection()->GetMessage(recipe, field),
                            hf.GetReflection()->GetMessage(hf, field), name + ".", path);
      if (!inner.empty()) return inner;
      continue;
    }
    std::vector<std::string> mine, theirs;
    const int count_mine =
        field->is_repeated() ? recipe.GetReflection()->FieldSize(recipe, field) : 1;
    const int count_theirs = field->is_repeated() ? hf.GetReflection()->FieldSize(hf, field) : 1;
    for (int i = 0; i < count_mine; ++i) {
      google::protobuf::TextFormat::PrintFieldValueToString(
          recipe, field, field->is_repeated() ? i : -1, &mine.emplace_back());
    }
    for (int i = 0; i < count_theirs; ++i) {
      google::protobuf::TextFormat::PrintFieldValueToString(
          hf, field, field->is_repeated() ? i : -1, &theirs.emplace_back());
    }
    if (mine == theirs) continue;
    auto text = [](const std::vector<std::string>& v) {
      return v.empty()       ? std::string("unset")
             : v.size() == 1 ? v[0]
                             : absl::StrCat("[", absl::StrJoin(v, ", "), "]");
    };
    return absl::StrCat(name, " is ", text(mine), " in the recipe but ", text(theirs), " in ",
                        path);
  }
  return "";
}

}  // namespace

absl::StatusOr<ModelConfig> MergeWithHfConfig(const ModelConfig& recipe, const ModelConfig& hf,
                                              const std::string& path) {
  if (recipe.has_moe() && !hf.has_moe()) {
    return UserError(
        absl::StrCat("the recipe's model.moe section describes a mixture of experts, but ", path,
                     " describes a dense model"),
        "remove model.moe from the recipe, or start from a mixture-of-experts checkpoint");
  }
  // 0 key-value heads means one per attention head (of the model, hf's):
  // compare what it means.
  ModelConfig recipe_view = recipe;
  if (recipe.has_num_key_value_heads() && recipe.num_key_value_heads() == 0) {
    recipe_view.set_num_key_value_heads(hf.num_attention_heads());
  }
  // Multi-head latent attention has no key-value heads to disagree on.
  if (UsesMla(hf)) recipe_view.clear_num_key_value_heads();
  // tetra's layout and training settings, not in config.json: the recipe's.
  recipe_view.clear_make_vocab_size_divisible_by();
  MoeConfig* moe_view = recipe_view.mutable_moe();
  moe_view->clear_aux_loss_alpha();
  moe_view->clear_bias_update_speed();
  moe_view->clear_capacity_factor();
  moe_view->clear_router_aux_loss_coef();
  if (!recipe.has_moe()) recipe_view.clear_moe();
  const std::string disagreement = FirstDisagreement(recipe_view, hf, "model.", path);
  if (!disagreement.empty()) {
    return UserError(disagreement,
                     "remove the field from the recipe's model section: with a Hugging Face "
                     "directory as init_from, the model comes from its config.json");
  }
  ModelConfig merged = hf;
  if (recipe.has_make_vocab_size_divisible_by()) {
    merged.set_make_vocab_size_divisible_by(recipe.make_vocab_size_divisible_by());
  }
  const MoeConfig& moe = recipe.moe();
  if (moe.has_aux_loss_alpha()) merged.mutable_moe()->set_aux_loss_alpha(moe.aux_loss_alpha());
  if (moe.has_bias_update_speed())
    merged.mutable_moe()->set_bias_update_speed(moe.bias_update_speed());
  if (moe.has_capacity_factor()) merged.mutable_moe()->set_capacity_factor(moe.capacity_factor());
  if (moe.has_router_aux_loss_coef())
    merged.mutable_moe()->set_router_aux_loss_coef(moe.router_aux_loss_coef());
  return merged;
}

namespace {

std::string YarnJson(const RopeScalingConfig& s) {
  std::string json = absl::StrCat(
      "{\"rope_type\": \"yarn\", \"factor\": ", Number(s.factor()),
      ", \"original_max_position_embeddings\": ", s.original_max_position_embeddings(),
      ", \"beta_fast\": ", Number(s.beta_fast()), ", \"beta_slow\": ", Number(s.beta_slow()));
  // 0 is tetra's "absent"; transformers would take an attention_factor of 0 as it is.
  for (const auto& [key, value] :
       {std::pair{"mscale", s.mscale()}, std::pair{"mscale_all_dim", s.mscale_all_dim()},
        std::pair{"attention_factor", s.attention_factor()}}) {
    if (value != 0) absl::StrAppend(&json, ", \"", key, "\": ", Number(value));
  }
  if (!s.truncate()) absl::StrAppend(&json, ", \"truncate\": false");
  return json + "}";
}

std::string RopeScalingJson(const RopeScalingConfig& s) {
  if (s.rope_type() == "yarn") return YarnJson(s);
  if (s.rope_type() != "llama3") return "null";
  return absl::StrCat(
      "{\"rope_type\": \"llama3\", \"factor\": ", Number(s.factor()),
      ", \"low_freq_factor\": ", Number(s.low_freq_factor()),
      ", \"high_freq_factor\": ", Number(s.high_freq_factor()),
      ", \"original_max_position_embeddings\": ", s.original_max_position_embeddings(), "}");
}

}  // namespace

namespace {

bool SoftmaxMoe(const ModelConfig& m) {
  return m.moe().n_routed_experts() > 0 && m.moe().scoring_func() == "softmax";
}

// The class an export names: model.hf_architecture (the class it was read
// from), else DeepseekV3 for multi-head latent attention, Glm4Moe for Llama
// attention with DeepSeek-V3's sigmoid-scored experts, Qwen3Moe and Mixtral
// for softmax-scored ones (with and without q/k norms), Qwen3 for q/k norms,
// Qwen2 for q/k/v biases, else Llama.
const HfClassInfo& ExportClass(const ModelConfig& m) {
  for (const HfClassInfo& c : kHfClasses) {
    if (c.architecture == m.hf_architecture()) return c;
  }
  const HfClass id = UsesMla(m)      ? HfClass::kDeepseekV3
                     : SoftmaxMoe(m) ? (m.qk_norm() ? HfClass::kQwen3Moe : HfClass::kMixtral)
                     : m.moe().n_routed_experts() > 0 ? HfClass::kGlm4Moe
                     : m.qk_norm()                    ? HfClass::kQwen3
                     : m.qkv_bias()                   ? HfClass::kQwen2
                                                      : HfClass::kLlama;
  for (const HfClassInfo& c : kHfClasses) {
    if (c.id == id) return c;
  }
  return kHfClasses[0];
}

// Whether `cls` computes `m`'s attention: Qwen2's biases and Qwen3's norms
// only there, a sliding window only in Mistral, MLA only in DeepseekV3, and
// experts only in the MoE classes. "" when it does, else what differs.
std::string ClassMismatch(const HfClassInfo& cls, const ModelConfig& m) {
  const bool mla_class = cls.id == HfClass::kDeepseekV3;
  const bool sigmoid_class = mla_class || cls.id == HfClass::kGlm4Moe;
  const bool softmax_class = cls.id == HfClass::kMixtral || cls.id == HfClass::kQwen3Moe;
  const MoeConfig& moe = m.moe();
  const bool has_moe = moe.n_routed_experts() > 0;
  if (m.qkv_bias() != (cls.id == HfClass::kQwen2))
    return "model.qkv_bias (q/k/v biases: Qwen2's alone)";
  if (m.qk_norm() != Qwen3Attention(cls.id))
    return "model.qk_norm (q/k head norms: Qwen3's and Qwen3Moe's alone)";
  if (m.sliding_window() > 0 && !MistralAttention(cls.id)) {
    return "model.sliding_window (Mistral's and Mixtral's alone)";
  }
  if (UsesMla(m) != mla_class) return "multi-head latent attention (DeepseekV3's alone)";
  if (has_moe && !sigmoid_class && !softmax_class) return "model.moe (routed experts)";
  if (has_moe && sigmoid_class && SoftmaxMoe(m)) {
    return "model.moe.scoring_func \"softmax\" (its router scores sigmoid)";
  }
  if (!softmax_class) return "";
  if (has_moe && !SoftmaxMoe(m))
    return "model.moe.scoring_func \"sigmoid\" (its router scores softmax)";
  if (moe.n_shared_experts() > 0 || moe.n_group() > 1 || moe.routed_scaling_factor() != 1) {
    return "model.moe's shared experts, expert groups or routed_scaling_factor (its router has "
           "none)";
  }
  if (cls.id == HfClass::kMixtral &&
      (!has_moe || !moe.norm_topk_prob() || moe.first_k_dense_replace() > 0)) {
    return "MoE (Mixtral's layers are all MoE, their top-k weights renormalised)";
  }
  return "";
}

using JsonKeys = std::vector<std::pair<std::string, std::string>>;

// The mixture-of-experts keys; a dense DeepseekV3 has no routed experts and
// every layer dense.
void AddMoeKeys(const ModelConfig& m, JsonKeys* keys) {
  const MoeConfig& e = m.moe();
  const bool dense = e.n_routed_experts() == 0;
  keys->insert(keys->end(),
               {{"n_routed_experts", absl::StrCat(e.n_routed_experts())},
                {"num_experts_per_tok", absl::StrCat(e.num_experts_per_tok())},
                {"n_shared_experts", absl::StrCat(e.n_shared_experts())},
                {"moe_intermediate_size", absl::StrCat(e.moe_intermediate_size())},
                {"first_k_dense_replace",
                 absl::StrCat(dense ? m.num_hidden_layers() : e.first_k_dense_replace())},
                {"norm_topk_prob", e.norm_topk_prob() ? "true" : "false"},
                {"routed_scaling_factor", Number(e.routed_scaling_factor())},
                {"n_group", absl::StrCat(e.n_group())},
                {"topk_group", absl::StrCat(e.topk_group())}});
}

// Mixtral's and Qwen3Moe's expert keys (ReadSoftmaxMoeKeys), transformers'
// balance loss on where tetra trains with it.
void AddSoftmaxMoeKeys(const ModelConfig& m, HfClass id, JsonKeys* keys) {
  const MoeConfig& e = m.moe();
  if (id == HfClass::kMixtral) {
    keys->insert(keys->end(), {{"num_local_experts", absl::StrCat(e.n_routed_experts())},
                               {"num_experts_per_tok", absl::StrCat(e.num_experts_per_tok())},
                               {"router_jitter_noise", "0.0"}});
  } else {
    std::vector<int> dense(e.n_routed_experts() > 0 ? e.first_k_dense_replace() : 0);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = static_cast<int>(i);
    keys->insert(keys->end(),
                 {{"num_experts", absl::StrCat(e.n_routed_experts())},
                  {"num_experts_per_tok", absl::StrCat(e.num_experts_per_tok())},
                  {"moe_intermediate_size", absl::StrCat(e.moe_intermediate_size())},
                  {"norm_topk_prob", e.norm_topk_prob() ? "true" : "false"},
                  {"decoder_sparse_step", "1"},
                  {"mlp_only_layers", absl::StrCat("[", absl::StrJoin(dense, ", "), "]")}});
  }
  const double coef = e.router_aux_loss_coef();
  keys->insert(keys->end(), {{"output_router_logits", coef > 0 ? "true" : "false"},
                             {"router_aux_loss_coef", Number(coef > 0 ? coef : 0.001)}});
}

// The attention heads' keys: MLA's for DeepseekV3, the key-value heads and
// head_dim for the others, and Glm4Moe's rotary and norm keys.
void AddHeadKeys(const ModelConfig& m, HfClass id, JsonKeys* keys) {
  if (id == HfClass::kDeepseekV3) {
    // DeepseekV3Config's own values of its derived keys; num_key_value_heads
    // is unused by MLA (its default: the heads).
    keys->insert(keys->end(),
                 {{"num_key_value_heads", absl::StrCat(m.num_attention_heads())},
                  {"head_dim", absl::StrCat(m.qk_rope_head_dim())},
                  {"kv_lora_rank", absl::StrCat(m.kv_lora_rank())},
                  {"q_lora_rank", m.q_lora_rank() > 0 ? absl::StrCat(m.q_lora_rank()) : "null"},
                  {"qk_nope_head_dim", absl::StrCat(m.qk_nope_head_dim())},
                  {"qk_rope_head_dim", absl::StrCat(m.qk_rope_head_dim())},
                  {"qk_head_dim", absl::StrCat(QkHeadDim(m))},
                  {"v_head_dim", absl::StrCat(m.v_head_dim())},
                  {"rope_interleave", m.rope_interleave() ? "true" : "false"}});
  } else {
    keys->insert(keys->end(), {{"num_key_value_heads", absl::StrCat(KeyValueHeads(m))},
                               {"head_dim", absl::StrCat(HeadDim(m))}});
  }
  if (id == HfClass::kGlm4Moe) {
    keys->insert(keys->end(), {{"partial_rotary_factor", "1.0"}, {"use_qk_norm", "false"}});
  }
}

// The keys of the projections' biases and of the sliding window, where the
// class reads them.
void AddBiasAndWindowKeys(const ModelConfig& m, HfClass id, JsonKeys* keys) {
  // Qwen2's biases are in its code, Mistral's family has none: neither reads the key.
  if (id != HfClass::kQwen2 && !MistralAttention(id)) keys->emplace_back("attention_bias", "false");
  if (id == HfClass::kLlama) keys->emplace_back("mlp_bias", "false");
  if (MistralAttention(id)) {
    keys->emplace_back("sliding_window",
                       m.sliding_window() > 0 ? absl::StrCat(m.sliding_window()) : "null");
  }
  if (id == HfClass::kQwen2 || Qwen3Attention(id)) {
    keys->insert(keys->end(), {{"use_sliding_window", "false"},
                               {"sliding_window", "null"},
                               {"max_window_layers", absl::StrCat(m.num_hidden_layers())}});
  }
}

// The MoE classes' expert keys.
void AddExpertKeys(const ModelConfig& m, HfClass id, JsonKeys* keys) {
  if (id == HfClass::kDeepseekV3 || id == HfClass::kGlm4Moe) AddMoeKeys(m, keys);
  if (id == HfClass::kMixtral || id == HfClass::kQwen3Moe) AddSoftmaxMoeKeys(m, id, keys);
  // The remote-code readers of DeepSeek-V3 checkpoints (vLLM, SGLang) read the router's kind here.
  if (id == HfClass::kDeepseekV3 && m.moe().n_routed_experts() > 0) {
    keys->insert(keys->end(),
                 {{"scoring_func", Quoted("sigmoid")}, {"topk_method", Quoted("noaux_tc")}});
  }
}

// bos_token_id and eos_token_id (one id or a list of them).
void AddTokenIdKeys(const ModelConfig& m, JsonKeys* keys) {
  // An absent id would take the class's default; null says "none".
  keys->emplace_back("bos_token_id",
                     m.bos_token_id() >= 0 ? absl::StrCat(m.bos_token_id()) : "null");
  if (m.eos_token_id_size() == 1)
    keys->emplace_back("eos_token_id", absl::StrCat(m.eos_token_id(0)));
  if (m.eos_token_id_size() > 1) {
    keys->emplace_back("eos_token_id",
                       absl::StrCat("[", absl::StrJoin(m.eos_token_id(), ", "), "]"));
  }
  if (m.eos_token_id_size() == 0) keys->emplace_back("eos_token_id", "null");
}

// Every class an export can name, from the class table so the list keeps up with it.
std::string ExportedClassNames() {
  std::vector<std::string> names;
  for (const HfClassInfo& c : kHfClasses) names.emplace_back(c.architecture);
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status CheckHfExportable(const ModelConfig& model) {
  const HfClassInfo& cls = ExportClass(model);
  if (!model.hf_architecture().empty() && model.hf_architecture() != cls.architecture) {
    return UserError(absl::StrCat("model.hf_architecture is ", UserText(model.hf_architecture()),
                                  ", not a class tetra exports"),
                     absl::StrCat("use one of ", ExportedClassNames(), ", or leave it empty"));
  }
  if (const std::string mismatch = ClassMismatch(cls, model); !mismatch.empty()) {
    return UserError(
        absl::StrCat("this model's ", mismatch, " is not what Hugging Face's ", cls.architecture,
                     ", the class its export would name, computes"),
        "set model.hf_architecture to the class that computes this model, or leave it empty");
  }
  return absl::OkStatus();
}

std::string HfArchitecture(const ModelConfig& model) { return ExportClass(model).architecture; }

std::string HfConfigJson(const ModelConfig& m, int64_t seq_length, DType dtype) {
  const HfClassInfo& cls = ExportClass(m);
  JsonKeys keys = {
      {"architectures", absl::StrCat("[", Quoted(cls.architecture), "]")},
      {"model_type", Quoted(cls.model_type)},
      {"vocab_size", absl::StrCat(m.vocab_size())},
      {"hidden_size", absl::StrCat(m.hidden_size())},
      // Mixtral's is its experts' width.
      {"intermediate_size",
       absl::StrCat(cls.id == HfClass::kMixtral ? m.moe().moe_intermediate_size()
                                                : m.intermediate_size())},
      {"num_hidden_layers", absl::StrCat(m.num_hidden_layers())},
      {"num_attention_heads", absl::StrCat(m.num_attention_heads())},
  };
  AddHeadKeys(m, cls.id, &keys);
  keys.insert(keys.end(),
              {
                  {"hidden_act", Quoted("silu")},
                  {"max_position_embeddings",
                   absl::StrCat(m.max_position_embeddings() > 0 ? m.max_position_embeddings()
                                                                : seq_length)},
                  {"rms_norm_eps", Number(m.rms_norm_eps())},
                  {"rope_theta", Number(m.rope_theta())},
                  {"rope_scaling", RopeScalingJson(m.rope_scaling())},
                  {"tie_word_embeddings", m.tie_word_embeddings() ? "true" : "false"},
                  {"attention_dropout", "0.0"},
                  {"initializer_range", Number(m.initializer_range())},
              });
  AddBiasAndWindowKeys(m, cls.id, &keys);
  AddExpertKeys(m, cls.id, &keys);
  // DeepSeek-V3's name; transformers keeps it as an attribute.
  if (m.num_nextn_predict_layers() > 0) {
    keys.emplace_back("num_nextn_predict_layers", absl::StrCat(m.num_nextn_predict_layers()));
  }
  AddTokenIdKeys(m, &keys);
  // The rest of the class's config fields, at the values tetra's math has.
  keys.insert(keys.end(),
              {{"pad_token_id", "null"}, {"pretraining_tp", "1"}, {"use_cache", "true"}});
  keys.emplace_back("torch_dtype", Quoted(dtype == DType::kBF16 ? "bfloat16" : "float32"));
  std::vector<std::string> lines;
  for (const auto& [key, value] : keys)
    lines.push_back(absl::StrCat("  ", Quoted(key), ": ", value));
  return absl::StrCat("{\n", absl::StrJoin(lines, ",\n"), "\n}\n");
}

std::string HfGenerationConfigJson(const ModelConfig& m) {
  std::vector<std::string> lines;
  if (m.bos_token_id() >= 0)
    lines.push_back(absl::StrCat("  \"bos_token_id\": ", m.bos_token_id()));
  if (m.eos_token_id_size() == 1)
    lines.push_back(absl::StrCat("  \"eos_token_id\": ", m.eos_token_id(0)));
  if (m.eos_token_id_size() > 1) {
    lines.push_back(
        absl::StrCat("  \"eos_token_id\": [", absl::StrJoin(m.eos_token_id(), ", "), "]"));
  }
  if (lines.empty()) return "";
  return absl::StrCat("{\n", absl::StrJoin(lines, ",\n"), "\n}\n");
}

}  // namespace tetra
