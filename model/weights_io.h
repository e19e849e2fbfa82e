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

// Writes DIR/model.safetensors (`dtype` kF32 or kBF16, global tensors) and
// DIR/config.json. Collective over `tp` and, for an expert-parallel model,
// `ep` (null: this rank holds every expert); only the rank with `write` writes.
absl::Status ExportWeights(const std::string& dir, const ParameterStore& store,
                           const ModelConfig& model, int64_t max_position_embeddings, DType dtype,
                           Communicator& tp, bool write, Communicator* ep = nullptr);

// The Hugging Face config.json text for `model`.
std::string HuggingFaceConfigJson(const ModelConfig& model, int64_t max_position_embeddings,
                                  DType dtype);

}  // namespace tetra

#endif  // TETRA_MODEL_WEIGHTS_IO_H_
