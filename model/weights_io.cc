#include "model/weights_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "model/model_dims.h"
#include "model/safetensors.h"

namespace tetra {
namespace {

// "a, b, c and 4 more"
std::string ListSome(const std::vector<std::string>& names) {
  constexpr size_t kShown = 6;
  if (names.size() <= kShown) return absl::StrJoin(names, ", ");
  std::vector<std::string> shown(names.begin(), names.begin() + kShown);
  return absl::StrCat(absl::StrJoin(shown, ", "), " and ", names.size() - kShown, " more");
}

// "model.layers.1.mlp.experts.*.up_proj.weight" for any routed expert's
// parameter name, else "": the routed experts of a layer are split over the
// expert-parallel ranks, so this rank's store lacks the others'.
std::string ExpertPattern(const std::string& name) {
  const std::string marker = ".mlp.experts.";
  const size_t begin = name.find(marker);
  if (begin == std::string::npos) return "";
  const size_t end = name.find('.', begin + marker.size());
  if (end == std::string::npos) return "";
  return absl::StrCat(name.substr(0, begin + marker.size()), "*", name.substr(end));
}

}  // namespace

absl::Status LoadWeights(const std::string& path, ParameterStore& store) {
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  std::vector<std::string> missing, mismatched, extra;
  std::set<std::string> expected, expert_patterns;
  for (const Parameter& p : store.all()) {
    expected.insert(p.name);
    if (p.expert) expert_patterns.insert(ExpertPattern(p.name));
    const SafetensorsEntry* entry = file.Find(p.name);
    if (entry == nullptr) {
      missing.push_back(p.name);
    } else if (entry->shape != p.global_shape) {
      mismatched.push_back(absl::StrCat(p.name, " is ", ShapeString(entry->shape), " in the file but ",
                                        ShapeString(p.global_shape), " in the model"));
    }
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    // Experts held by other expert-parallel ranks are not extra (the gate's
    // shape (experts, hidden) has checked their number).
    if (!expected.count(entry.name) && !expert_patterns.count(ExpertPattern(entry.name))) {
      extra.push_back(entry.name);
    }
  }
  if (!missing.empty() || !mismatched.empty() || !extra.empty()) {
    std::vector<std::string> problems;
    if (!missing.empty()) problems.push_back(absl::StrCat(missing.size(), " missing (", ListSome(missing), ")"));
    if (!mismatched.empty()) problems.push_back(absl::StrCat(mismatched.size(), " with the wrong shape (", ListSome(mismatched), ")"));
    if (!extra.empty()) problems.push_back(absl::StrCat(extra.size(), " not in the model (", ListSome(extra), ")"));
    return UserError(absl::StrCat("weights in ", path, " do not match the model: ",
                                  absl::StrJoin(problems, "; ")),
                     "the model section of the config must describe the checkpoint's architecture "
                     "(sizes, num_key_value_heads, tie_word_embeddings)");
  }
  // Read everything into temporaries first so a failure leaves the model as it
  // was; each rank keeps only its tensor-parallel slice of each tensor.
  std::vector<Tensor> loaded;
  for (const Parameter& p : store.all()) {
    Tensor global = Tensor::Empty(p.global_shape);
    RETURN_IF_ERROR(file.ReadF32(p.name, global.f32()));
    Tensor slice = Tensor::Empty(p.value.shape());
    for (int64_t i = 0; i < slice.numel(); ++i) slice.f32()[i] = global.f32()[p.GlobalIndex(i)];
    loaded.push_back(slice);
  }
  size_t i = 0;
  for (Parameter& p : store.all()) p.value.CopyFrom(loaded[i++]);
  return absl::OkStatus();
}

// DeepSeek-V3's mixture-of-experts keys, for a model with routed experts.
std::string MoeConfigJson(const ModelConfig& m) {
  if (m.moe().n_routed_experts() == 0) return "";
  const MoeConfig& moe = m.moe();
  return absl::StrFormat(
      "  \"n_routed_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"n_shared_experts\": %d,\n"
      "  \"moe_intermediate_size\": %d,\n  \"first_k_dense_replace\": %d,\n"
      "  \"scoring_func\": \"%s\",\n  \"norm_topk_prob\": %s,\n  \"routed_scaling_factor\": %.9g,\n"
      "  \"n_group\": %d,\n  \"topk_group\": %d,\n  \"topk_method\": \"noaux_tc\",\n",
      moe.n_routed_experts(), moe.num_experts_per_tok(), moe.n_shared_experts(),
      moe.moe_intermediate_size(), moe.first_k_dense_replace(), moe.scoring_func(),
      moe.norm_topk_prob() ? "true" : "false", moe.routed_scaling_factor(), moe.n_group(),
      moe.topk_group());
}

std::string HuggingFaceConfigJson(const ModelConfig& m, int64_t max_position_embeddings,
                                  DType dtype) {
  const bool moe = m.moe().n_routed_experts() > 0;
  return absl::StrFormat(
      "{\n"
      "  \"architectures\": [\"%s\"],\n"
      "  \"model_type\": \"%s\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"hidden_size\": %d,\n"
      "  \"intermediate_size\": %d,\n"
      "  \"num_hidden_layers\": %d,\n"
      "  \"num_attention_heads\": %d,\n"
      "  \"num_key_value_heads\": %d,\n"
      "  \"head_dim\": %d,\n"
      "  \"hidden_act\": \"silu\",\n"
      "  \"max_position_embeddings\": %d,\n"
      "  \"rms_norm_eps\": %.9g,\n"
      "  \"rope_theta\": %.9g,\n"
      "  \"tie_word_embeddings\": %s,\n"
      "  \"attention_bias\": false,\n"
      "  \"mlp_bias\": false,\n"
      "  \"initializer_range\": %.9g,\n"
      "%s"
      "  \"torch_dtype\": \"%s\"\n"
      "}\n",
      moe ? "DeepseekV3ForCausalLM" : "LlamaForCausalLM", moe ? "deepseek_v3" : "llama",
      m.vocab_size(), m.hidden_size(), m.intermediate_size(), m.num_hidden_layers(),
      m.num_attention_heads(), KeyValueHeads(m), HeadDim(m), max_position_embeddings,
      m.rms_norm_eps(), m.rope_theta(), m.tie_word_embeddings() ? "true" : "false",
      m.initializer_range(), MoeConfigJson(m), dtype == DType::kBF16 ? "bfloat16" : "float32");
}

Tensor GatherGlobal(const Parameter& p, Communicator& tp) {
  if (p.shard.dim < 0) return p.value;
  TETRA_CHECK(p.shard.count * p.shard.replicas == tp.size() &&
              p.shard.index == tp.rank() / p.shard.replicas)
      << p.name << ": slice " << p.shard.index << " of " << p.shard.count << " (x"
      << p.shard.replicas << ") does not match tensor-parallel rank " << tp.rank() << " of " << tp.size();
  const int64_t local = p.value.numel();
  Tensor slices = Tensor::Empty({tp.size() * local});
  tp.AllGather(p.value.raw(), slices.raw(), local, DType::kF32);
  Tensor global = Tensor::Empty(p.global_shape);
  for (int r = 0; r < tp.size(); r += p.shard.replicas) {  // one copy of each slice
    TensorShard shard = p.shard;
    shard.index = r / p.shard.replicas;
    const float* from = slices.f32() + r * local;
    for (int64_t i = 0; i < local; ++i) global.f32()[ShardGlobalIndex(p.global_shape, shard, i)] = from[i];
  }
  return global;
}

namespace {

// `name` ("model.layers.1.mlp.experts.3.up_proj.weight") with its expert index moved by `shift`.
std::string ShiftExpertIndex(const std::string& name, int shift) {
  const std::string marker = ".experts.";
  const size_t begin = name.find(marker) + marker.size();
  const size_t end = name.find('.', begin);
  TETRA_CHECK(begin != std::string::npos + marker.size() && end != std::string::npos)
      << name << " is not a routed expert's parameter";
  return absl::StrCat(name.substr(0, begin), std::stoi(name.substr(begin, end - begin)) + shift,
                      name.substr(end));
}

}  // namespace

std::vector<NamedTensor> GatherExperts(const ParameterStore& store, const ModelConfig& model,
                                       Communicator& tp, Communicator& ep) {
  std::vector<const Parameter*> local;
  std::vector<Tensor> whole;
  int64_t elements = 0;
  for (const Parameter& p : store.all()) {
    if (!p.expert) continue;
    local.push_back(&p);
    whole.push_back(GatherGlobal(p, tp));
    elements += whole.back().numel();
  }
  // Every rank holds the same parameters of other experts: the same sizes, in the same order.
  Tensor mine = Tensor::Empty({elements});
  int64_t at = 0;
  for (const Tensor& t : whole) {
    mine.Slice(at, at + t.numel()).CopyFrom(t.Reshape({t.numel()}));
    at += t.numel();
  }
  Tensor all = Tensor::Empty({ep.size() * elements});
  ep.AllGather(mine.raw(), all.raw(), elements, DType::kF32);
  const int per_rank = model.moe().n_routed_experts() / ep.size();
  std::vector<NamedTensor> experts;
  at = 0;
  for (int r = 0; r < ep.size(); ++r) {
    for (const Parameter* p : local) {
      const int64_t n = NumElements(p->global_shape);
      experts.push_back({ShiftExpertIndex(p->name, (r - ep.rank()) * per_rank),
                         all.Slice(at, at + n).Reshape(p->global_shape)});
      at += n;
    }
  }
  return experts;
}

void GatherStages(Communicator& pp, std::vector<NamedTensor>& globals) {
  // Each stage describes its tensors as "name dim dim ...\n" lines, then
  // sends that text (padded to whole int32 words) and the tensors' data.
  if (pp.rank() > 0) {
    std::string names;
    for (const NamedTensor& t : globals) {
      absl::StrAppend(&names, t.name);
      for (int64_t d : t.value.shape()) absl::StrAppend(&names, " ", d);
      names += "\n";
    }
    names.resize((names.size() + 3) / 4 * 4, '\n');
    const int32_t words = static_cast<int32_t>(names.size() / 4);
    pp.Send(&words, 1, DType::kI32, 0);
    pp.Send(names.data(), words, DType::kI32, 0);
    for (const NamedTensor& t : globals) pp.Send(t.value.raw(), t.value.numel(), DType::kF32, 0);
    return;
  }
  std::set<std::string> have;
  for (const NamedTensor& t : globals) have.insert(t.name);
  for (int stage = 1; stage < pp.size(); ++stage) {
    int32_t words = 0;
    pp.Recv(&words, 1, DType::kI32, stage);
    std::string names(words * 4, '\n');
    pp.Recv(names.data(), words, DType::kI32, stage);
    std::istringstream lines(names);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      std::istringstream fields(line);
      std::string name;
      Shape shape;
      fields >> name;
      for (int64_t d; fields >> d;) shape.push_back(d);
      Tensor value = Tensor::Empty(shape);
      pp.Recv(value.raw(), value.numel(), DType::kF32, stage);
      if (have.insert(name).second) globals.push_back({name, value});
    }
  }
}

absl::Status ExportWeights(const std::string& dir, const ParameterStore& store, const ModelConfig& model,
                           int64_t max_position_embeddings, DType dtype, Communicator& tp, bool write,
                           Communicator* ep, Communicator* pp) {
  // Every tensor-parallel (and expert-parallel) rank takes part in the gathers; one writes.
  const bool gather_experts = ep != nullptr && ep->size() > 1;
  std::vector<NamedTensor> globals;
  for (const Parameter& p : store.all()) {
    if (!(gather_experts && p.expert)) globals.push_back({p.name, GatherGlobal(p, tp)});
  }
  if (gather_experts) {
    for (NamedTensor& expert : GatherExperts(store, model, tp, *ep)) globals.push_back(std::move(expert));
  }
  if (pp != nullptr && pp->size() > 1 && tp.rank() == 0) GatherStages(*pp, globals);
  if (!write) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return UserError(absl::StrCat("cannot create export directory ", dir, ": ", error.message()),
                     "choose a writable export_path / --out directory");
  }
  std::vector<SafetensorsTensorRef> tensors;
  for (const NamedTensor& t : globals) tensors.push_back({t.name, t.value.shape(), t.value.f32()});
  RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", tensors, dtype,
                                   {{"format", "pt"}, {"producer", "tetra"}}));
  const std::string config_path = dir + "/config.json";
  std::ofstream config(config_path + ".tmp");
  config << HuggingFaceConfigJson(model, max_position_embeddings, dtype);
  config.close();
  if (!config || std::rename((config_path + ".tmp").c_str(), config_path.c_str()) != 0) {
    return UserError(absl::StrCat("writing ", config_path, " failed: ", std::strerror(errno)),
                     "check the disk has space and the directory is writable", absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

}  // namespace tetra
