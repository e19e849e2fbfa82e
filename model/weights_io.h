// Importing and exporting a model's weights as Hugging Face safetensors.
// Import checks every name and shape and lists everything missing, extra or
// mismatched in one error; export writes DIR/model.safetensors and an HF
// config.json beside it (LlamaForCausalLM), loadable by `transformers` as is.
#ifndef TETRA_MODEL_WEIGHTS_IO_H_
#define TETRA_MODEL_WEIGHTS_IO_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

// Loads every parameter of `store` (this rank's slice of each) from the
// safetensors file at `path` (F32, BF16 or F16 tensors, global shapes). On
// error `store` is left unchanged. Routed experts the store lacks (another
// expert-parallel rank's) are skipped.
absl::Status LoadWeights(const std::string& path, ParameterStore& store);

// The whole tensor of a parameter split over the tensor-parallel group `tp`
// (collective over `tp`; a replicated parameter is returned as is).
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

// Writes DIR/model.safetensors (`dtype` kF32 or kBF16, global tensors) and
// DIR/config.json. Collective over `tp`; for an expert-parallel model over
// `ep` (null: this rank holds every expert); under pipeline parallelism over
// `pp`, whose tensor-parallel rank 0s send their stage to the writer (null:
// this rank holds every layer). Only the rank with `write` writes, which must
// be tensor- and pipeline-parallel rank 0.
absl::Status ExportWeights(const std::string& dir, const ParameterStore& store,
                           const ModelConfig& model, int64_t max_position_embeddings, DType dtype,
                           Communicator& tp, bool write, Communicator* ep = nullptr,
                           Communicator* pp = nullptr);

// The Hugging Face config.json text for `model`.
std::string HuggingFaceConfigJson(const ModelConfig& model, int64_t max_position_embeddings,
                                  DType dtype);

}  // namespace tetra

#endif  // TETRA_MODEL_WEIGHTS_IO_H_
