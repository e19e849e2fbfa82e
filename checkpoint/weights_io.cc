#include "checkpoint/weights_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weight_files.h"
#include "core/atomic_file.h"
#include "core/file_type.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "model/language_model.h"
#include "model/model_dims.h"

namespace tetra {
namespace {

// "a, b, c and 4 more"
std::string ListSome(const std::vector<std::string>& names) {
  constexpr size_t kShown = 6;
  if (names.size() <= kShown) return absl::StrJoin(names, ", ");
  std::vector<std::string> shown(names.begin(), names.begin() + kShown);
  return absl::StrCat(absl::StrJoin(shown, ", "), " and ", names.size() - kShown, " more");
}

// Every tensor of the whole model against the file: one error listing what is
// missing, mismatched and extra.
absl::Status CheckAgainstModel(const WeightFiles& files, const ModelConfig& model) {
  std::vector<std::string> missing, mismatched, extra;
  std::set<std::string> expected;
  for (const ModelTensor& t : WholeModelTensors(model)) {
    expected.insert(t.name);
    const SafetensorsEntry* entry = files.Find(t.name);
    if (entry == nullptr) {
      missing.push_back(t.name);
    } else if (entry->shape != t.shape) {
      mismatched.push_back(absl::StrCat(t.name, " is ", ShapeString(entry->shape),
                                        " in the file but ", ShapeString(t.shape),
                                        " in the model"));
    }
  }
  for (const SafetensorsEntry* entry : files.entries()) {
    if (!expected.count(entry->name)) extra.push_back(UserText(entry->name));
  }
  if (missing.empty() && mismatched.empty() && extra.empty()) return absl::OkStatus();
  std::vector<std::string> problems;
  if (!missing.empty())
    problems.push_back(absl::StrCat(missing.size(), " missing (", ListSome(missing), ")"));
  if (!mismatched.empty())
    problems.push_back(
        absl::StrCat(mismatched.size(), " with the wrong shape (", ListSome(mismatched), ")"));
  if (!extra.empty())
    problems.push_back(absl::StrCat(extra.size(), " not in the model (", ListSome(extra), ")"));
  return UserError(absl::StrCat("weights in ", files.path(),
                                " do not match the model: ", absl::StrJoin(problems, "; ")),
                   "the model section of the config must describe the checkpoint's architecture "
                   "(sizes, num_key_value_heads, tie_word_embeddings, model.moe)");
}

// No trained or initialised model holds a weight beyond float16's largest
// value (models are routinely served in fp16); one that does comes from a
// damaged file or one that is not a model, and would "diverge" in step 1.
constexpr float kLargestPlausibleWeight = 65504.0f;

// Every element of `global`, tensor `name` of the weights at `path`, finite
// and within kLargestPlausibleWeight.
absl::Status CheckPlausibleWeights(const std::string& path, const std::string& name,
                                   const Tensor& global) {
  for (int64_t i = 0; i < global.numel(); ++i) {
    const float v = global.f32()[i];
    if (!std::isfinite(v)) {
      return UserError(absl::StrCat("weights in ", path, ": tensor ", name, " holds ", v,
                                    " at element ", i, ", so training would start diverged"),
                       "start from a checkpoint whose weights are all finite");
    }
    if (std::abs(v) > kLargestPlausibleWeight) {
      return UserError(
          absl::StrCat("weights in ", path, ": tensor ", name, " holds ", v, " at element ", i,
                       ", beyond float16's range (65504), which no trained model's weights reach"),
          "the file is damaged or is not a model's weights: start from the checkpoint as its "
          "trainer wrote it");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadWeights(const std::string& path, const ModelConfig& model, ParameterStore& store) {
  ASSIGN_OR_RETURN(const WeightFiles files, WeightFiles::Open(path));
  RETURN_IF_ERROR(CheckAgainstModel(files, model));
  // Read everything into temporaries first so a failure leaves the model as it
  // was; each rank keeps only its tensor-parallel slice of each tensor.
  std::vector<Tensor> loaded;
  for (const Parameter& p : store.all()) {
    Tensor global = Tensor::Empty(p.global_shape);
    RETURN_IF_ERROR(files.ReadF32(p.name, global.f32()));
    RETURN_IF_ERROR(CheckPlausibleWeights(path, p.name, global));
    Tensor slice = Tensor::Empty(p.value.shape());
    for (int64_t i = 0; i < slice.numel(); ++i) {
      const int64_t g = p.GlobalIndex(i);
      slice.f32()[i] = g < 0 ? 0.0f : global.f32()[g];  // padding rows stay 0
    }
    loaded.push_back(slice);
  }
  size_t i = 0;
  for (Parameter& p : store.all()) p.value.CopyFrom(loaded[i++]);
  store.RefreshCompute();
  return absl::OkStatus();
}

Tensor GatherGlobal(const Parameter& p, Communicator& tp) {
  if (p.shard.dim < 0) return OnHost(p.value);
  TETRA_CHECK(p.shard.count * p.shard.replicas == tp.size() &&
              p.shard.index == tp.rank() / p.shard.replicas)
      << p.name << ": slice " << p.shard.index << " of " << p.shard.count << " (x"
      << p.shard.replicas << ") does not match tensor-parallel rank " << tp.rank() << " of "
      << tp.size();
  const int64_t local = p.value.numel();
  // Gathered where the values live, rearranged on the host.
  Tensor slices = Tensor::Empty({tp.size() * local}, p.value.dtype(), p.value.device());
  tp.AllGather(p.value, slices);
  slices = OnHost(slices);
  Tensor global = Tensor::Empty(p.global_shape);
  for (int r = 0; r < tp.size(); r += p.shard.replicas) {  // one copy of each slice
    TensorShard shard = p.shard;
    shard.index = r / p.shard.replicas;
    const float* from = slices.f32() + r * local;
    for (int64_t i = 0; i < local; ++i) {
      const int64_t g = ShardGlobalIndex(p.global_shape, shard, i);
      if (g >= 0) global.f32()[g] = from[i];  // padding rows are left out
    }
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
  ep.AllGather(mine, all);
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
    int32_t words = static_cast<int32_t>(names.size() / 4);
    pp.Send(Tensor::View(&words, {1}, DType::kI32), 0);
    pp.Send(Tensor::View(names.data(), {words}, DType::kI32), 0);
    for (const NamedTensor& t : globals) pp.Send(t.value, 0);
    return;
  }
  std::set<std::string> have;
  for (const NamedTensor& t : globals) have.insert(t.name);
  for (int stage = 1; stage < pp.size(); ++stage) {
    int32_t words = 0;
    pp.Recv(Tensor::View(&words, {1}, DType::kI32), stage);
    std::string names(words * 4, '\n');
    pp.Recv(Tensor::View(names.data(), {words}, DType::kI32), stage);
    std::istringstream lines(names);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      std::istringstream fields(line);
      std::string name;
      Shape shape;
      fields >> name;
      for (int64_t d; fields >> d;) shape.push_back(d);
      Tensor value = Tensor::Empty(shape);
      pp.Recv(value, stage);
      if (have.insert(name).second) globals.push_back({name, value});
    }
  }
}

namespace {

// A model directory's files about its tokenizer and its generation, not its
// weights, which transformers' from_pretrained of a tokenizer or a
// GenerationConfig reads.
constexpr const char* kOriginFiles[] = {"tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json",
                                        "tokenizer.model",
                                        "vocab.json",
                                        "merges.txt",
                                        "chat_template.jinja",
                                        "chat_template.json",
                                        "generation_config.json"};

// Copies the origin's files (kOriginFiles) that exist into `dir`; their names.
absl::StatusOr<std::vector<std::string>> CopyOriginFiles(const std::string& origin,
                                                         const std::string& dir,
                                                         const char* write_hint) {
  std::vector<std::string> copied;
  const std::string config = origin.empty() ? "" : HfConfigPathOf(origin);
  if (config.empty()) return copied;
  const std::filesystem::path from = std::filesystem::path(config).parent_path();
  for (const char* name : kOriginFiles) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(from / name, error)) continue;
    ASSIGN_OR_RETURN(
        const std::string bytes,
        ReadInputFile((from / name).string(), "the run's init_from model directory's file",
                      "the export copies it from init_from: check the directory is readable"));
    RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + name, bytes, write_hint));
    copied.push_back(name);
  }
  return copied;
}

}  // namespace

absl::Status CheckExportFiles(const std::string& dir, const std::string& what,
                              const std::string& hint) {
  for (const char* name : {"model.safetensors", "config.json"}) {
    RETURN_IF_ERROR(CheckOutputPath(absl::StrCat(dir, "/", name), what, hint));
  }
  for (const char* name : kOriginFiles) {
    RETURN_IF_ERROR(CheckOutputPath(absl::StrCat(dir, "/", name), what, hint));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> WriteHfModelDirectory(
    const std::string& dir, const std::vector<NamedTensor>& tensors, const ModelConfig& model,
    int64_t seq_length, DType dtype, const HfExportExtras& extras) {
  RETURN_IF_ERROR(CheckHfExportable(model));
  // Every file checked before the first is written: never half an export.
  RETURN_IF_ERROR(CheckExportFiles(dir, "the export's file",
                                   "remove it or choose another export_path / --out directory"));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return UserError(absl::StrCat("cannot create export directory ", dir, ": ", error.message()),
                     "choose a writable export_path / --out directory");
  }
  std::vector<SafetensorsTensorRef> refs;
  for (const NamedTensor& t : tensors) refs.push_back({t.name, t.value.shape(), t.value.f32()});
  std::map<std::string, std::string> all_metadata = {{"format", "pt"}, {"producer", "tetra"}};
  all_metadata.insert(extras.metadata.begin(), extras.metadata.end());
  RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", refs, dtype, all_metadata));
  constexpr char kHint[] = "check the disk has space and the directory is writable";
  RETURN_IF_ERROR(
      WriteFileAtomically(dir + "/config.json", HfConfigJson(model, seq_length, dtype), kHint));
  ASSIGN_OR_RETURN(const std::vector<std::string> copied,
                   CopyOriginFiles(extras.origin, dir, kHint));
  const std::string generation = HfGenerationConfigJson(model);
  const bool origin_generation =
      std::find(copied.begin(), copied.end(), "generation_config.json") != copied.end();
  if (!generation.empty() && !origin_generation) {
    RETURN_IF_ERROR(WriteFileAtomically(dir + "/generation_config.json", generation, kHint));
  }
  return copied;
}

absl::Status ExportWeights(const std::string& dir, const ParameterStore& store,
                           const ModelConfig& model, int64_t seq_length, DType dtype,
                           Communicator& tp, bool write, Communicator* ep, Communicator* pp,
                           const std::string& origin) {
  // Every tensor-parallel (and expert-parallel) rank takes part in the gathers; one writes.
  const bool gather_experts = ep != nullptr && ep->size() > 1;
  std::vector<NamedTensor> globals;
  for (const Parameter& p : store.all()) {
    if (!(gather_experts && p.expert)) globals.push_back({p.name, GatherGlobal(p, tp)});
  }
  if (gather_experts) {
    for (NamedTensor& expert : GatherExperts(store, model, tp, *ep))
      globals.push_back(std::move(expert));
  }
  if (pp != nullptr && pp->size() > 1 && tp.rank() == 0) GatherStages(*pp, globals);
  if (!write) return absl::OkStatus();
  return WriteHfModelDirectory(dir, globals, model, seq_length, dtype,
                               {.metadata = {}, .origin = origin})
      .status();
}

}  // namespace tetra
