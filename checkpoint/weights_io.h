// Importing and exporting a model's weights as Hugging Face safetensors.
// Import reads a file, a sharded index or a model directory (WeightFiles),
// checks every name and shape against the whole model whatever this rank
// holds, lists everything missing, extra or mismatched in one error, and
// loads this rank's slice of each of its parameters. Export writes a Hugging
// Face model directory: DIR/model.safetensors, config.json and
// generation_config.json, loadable by `transformers` as is; for a run that
// started from a model directory, with that directory's tokenizer files and
// generation_config.json, so AutoTokenizer loads it too.
#ifndef TETRA_CHECKPOINT_WEIGHTS_IO_H_
#define TETRA_CHECKPOINT_WEIGHTS_IO_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

// Loads every parameter of `store` (this rank's slice of each: its pipeline
// stage, its tensor-parallel shards, its routed experts) from the weights at
// `path` (F32, BF16 or F16 tensors, global shapes), which must hold exactly
// the tensors of the whole model `model` describes, all finite. On error
// `store` is left unchanged.
absl::Status LoadWeights(const std::string& path, const ModelConfig& model, ParameterStore& store);

// The whole tensor of a parameter split over the tensor-parallel group `tp`,
// on the host (collective over `tp`; a replicated parameter's own values, or
// their host copy on a GPU run).
Tensor GatherGlobal(const Parameter& p, Communicator& tp);

// Every routed expert's whole parameters in an expert-parallel model: this
// rank's and, gathered over `ep`, those the other ranks hold, named by their
// global expert index, in rank order; tensor-parallel slices are gathered
// over `tp` first. Collective over tp and ep. `ep` splits the model's
// n_routed_experts evenly, ep rank r holding [r E / ep, (r + 1) E / ep).
struct NamedTensor {
  std::string name;
  Tensor value;
};
std::vector<NamedTensor> GatherExperts(const ParameterStore& store, const ModelConfig& model,
                                       Communicator& tp, Communicator& ep);

// Moves every pipeline stage's `globals` to pipeline rank 0, appended in stage
// order; a name rank 0 already has (a tied embedding's last-stage copy) is
// dropped. Collective over `pp`; the other ranks keep theirs unchanged.
void GatherStages(Communicator& pp, std::vector<NamedTensor>& globals);

// What an export writes beside the weights: `metadata` added to tetra's in
// model.safetensors, and `origin`, the run's init_from: when it is (or lies
// in) a Hugging Face model directory, that directory's tokenizer files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, a chat
// template, ...) and generation_config.json are copied into the export.
struct HfExportExtras {
  std::map<std::string, std::string> metadata;
  std::string origin;
};

// OK when every file an export writes into `dir` (the weights, config.json,
// what it may copy from init_from) is absent or a regular file; else
// CheckOutputPath's error naming `what` and ending with `hint`. Run before
// any is written, and by train before its first step.
absl::Status CheckExportFiles(const std::string& dir, const std::string& what,
                              const std::string& hint);

// Writes the Hugging Face model directory `dir` (created if needed):
// model.safetensors holding `tensors` (global, fp32) as `dtype` (kF32 or
// kBF16), config.json (max_position_embeddings the model's, else
// `seq_length`), the origin's files (HfExportExtras) and, when the origin
// has none and token ids are known, tetra's generation_config.json. A model
// no Hugging Face class computes is refused. Returns the files copied from
// the origin.
absl::StatusOr<std::vector<std::string>> WriteHfModelDirectory(
    const std::string& dir, const std::vector<NamedTensor>& tensors, const ModelConfig& model,
    int64_t seq_length, DType dtype, const HfExportExtras& extras = {});

// Gathers the whole model and writes it with WriteHfModelDirectory.
// Collective over `tp`; for an expert-parallel model over
// `ep` (null: this rank holds every expert); under pipeline parallelism over
// `pp`, whose tensor-parallel rank 0s send their stage to the writer (null:
// this rank holds every layer). Only the rank with `write` writes, which must
// be tensor- and pipeline-parallel rank 0.
absl::Status ExportWeights(const std::string& dir, const ParameterStore& store,
                           const ModelConfig& model, int64_t seq_length, DType dtype,
                           Communicator& tp, bool write, Communicator* ep = nullptr,
                           Communicator* pp = nullptr, const std::string& origin = "");

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_WEIGHTS_IO_H_
