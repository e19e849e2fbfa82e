// Named parameters with their gradients, how each is split over the
// tensor-parallel ranks, and their initialisation as a pure function of
// (seed, parameter name, global element index): a shard draws exactly its
// slice of the global tensor, so every layout starts from the same global
// weights. After Pack() all values (and all gradients) live in one flat
// buffer each, which data-parallel reduction and the sharded optimizer walk;
// routed experts' weights live in a second pair of flat buffers, since they
// are reduced over another group (expert-data-parallel, not data-parallel).
#ifndef TETRA_MODEL_PARAMETERS_H_
#define TETRA_MODEL_PARAMETERS_H_

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/tensor.h"
#include "kernels/weight_gradients.h"

namespace tetra {

class Communicator;

// How a parameter's global tensor is split over the tensor-parallel group.
struct TensorShard {
  int dim = -1;   // the split dim; -1: this rank holds the whole tensor
  int index = 0;  // this rank holds slice `index` of `count` equal slices
  int count = 1;
  int replicas = 1;  // ranks of the group holding this same slice (e.g. norm weights: tp)
  // Dim 0 only: the extent the slices divide, above the global one when rows
  // of padding are appended (a padded vocabulary); 0: none. Each slice then
  // holds its real rows first (possibly none), then padding rows, which stay
  // 0 and belong to no global element.
  int64_t padded_extent = 0;
};

struct Parameter {
  std::string name;    // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Tensor value;        // this rank's slice
  Tensor grad;         // same shape; accumulated over micro-batches
  bool weight_decay;   // AdamW decay: matrices yes, norm weights no
  Shape global_shape;  // the whole tensor across the tensor-parallel group
  TensorShard shard;
  int64_t flat_offset = -1;  // position of value/grad in the flat buffers, after Pack()
  // Pipeline stages holding a copy of this slice: 2 for a tied embedding
  // table whose LM head lives on another stage than the embedding, else 1.
  int stage_copies = 1;
  // A routed expert's weight (set before Pack()): in the expert flat buffers,
  // flat_offset counting from their start.
  bool expert = false;
  // False for a buffer (the MoE router's correction bias): saved and
  // exported, but no gradient, no decay, no optimizer update, not clipped.
  bool trainable = true;
  // What the forward and backward read: `value` itself, or under a bf16
  // placement its bf16 copy (refreshed by ParameterStore::RefreshCompute).
  Tensor compute = Tensor();
  // A slice every rank of this group holds whole but whose gradient each
  // computes only a part of (a norm weight under sequence parallelism: its
  // token rows; a key-value head shared by several tensor-parallel ranks:
  // their query heads): the gradient is the sum of the parts over the
  // group, which the optimizer's gradient finalisation takes once per step.
  // Null: this rank's gradient is whole.
  Communicator* grad_partial_over = nullptr;

  // Flat index in the global tensor of element `local` of this slice; -1 for padding.
  int64_t GlobalIndex(int64_t local) const;
  // The leading elements of this slice that are real (the rest is padding).
  int64_t RealElements() const;
};

// Several parameters' slots viewed as one tensor stacked along dim 0
// (ParameterStore::Stacked): the value, gradient and compute views of them all.
struct StackedParameters {
  Tensor value, grad, compute;
};

enum class Init { kOnes, kNormal, kZeros };

// kShapesOnly: the store records names, shapes and flat offsets but holds no
// values or gradients (Tensor::Unallocated): a model described, not built, so
// its whole list of tensors is known at no memory cost.
enum class Storage { kAllocated, kShapesOnly };

class ParameterStore {
 public:
  explicit ParameterStore(uint64_t seed, Storage storage = Storage::kAllocated)
      : seed_(seed), storage_(storage) {}

  // Adds this rank's slice of a parameter of `global_shape`, initialised per
  // `init`: kNormal draws global element g as std x Normal(seed, StableHash(name), g).
  // A buffer (!trainable) keeps its values out of the optimizer's reach.
  // Names are unique (checked).
  Parameter& Add(std::string name, const Shape& global_shape, Init init, double std = 0.0,
                 TensorShard shard = {}, bool trainable = true);

  // Moves every value and gradient into one flat buffer each (64-byte aligned
  // slots, registration order, zero padding up to a multiple of
  // `total_multiple` elements, e.g. for even data-parallel shards), experts'
  // into the expert buffers (padded to `expert_total_multiple`), on the
  // current placement's device, fp32 (master weights, gradients); with a
  // bf16 placement also flat bf16 compute copies of the values. No Add after
  // this. Under kShapesOnly only the offsets are assigned.
  void Pack(int64_t total_multiple = 1, int64_t expert_total_multiple = 1);
  const Tensor& flat_values() const { return flat_values_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  // Empty (0 elements) when the model has no routed experts.
  const Tensor& expert_flat_values() const { return expert_flat_values_; }
  const Tensor& expert_flat_grads() const { return expert_flat_grads_; }
  // The bf16 compute copies of the flat values (undefined in fp32).
  const Tensor& flat_compute() const { return flat_compute_; }
  const Tensor& expert_flat_compute() const { return expert_flat_compute_; }
  // Rounds the values into the compute copies (after every change of the
  // values: optimizer step, weight load); nothing to do in fp32.
  void RefreshCompute();

  // In registration order; a deque keeps references stable as parameters are added.
  std::deque<Parameter>& all() { return parameters_; }
  const std::deque<Parameter>& all() const { return parameters_; }
  Parameter* Find(std::string_view name);
  // `params` of this store as one tensor stacked along dim 0, when their
  // slots follow one another with no alignment padding between them (each
  // but the last a whole number of 64-byte slots) and their shapes agree past
  // dim 0, so one GEMM runs over them all (the MLP's gate and up
  // projections); nullopt otherwise, and before Pack() or under kShapesOnly.
  std::optional<StackedParameters> Stacked(std::initializer_list<const Parameter*> params) const;
  // The parameter whose slot in the flat buffers (the expert ones when
  // `expert`) holds flat element `offset` (after Pack(); a checkpoint maps
  // optimizer ranges to names with it).
  const Parameter& AtFlatOffset(int64_t offset, bool expert = false) const;
  void ZeroGrads();
  // Where the layers' backwards send their weight-gradient halves: run at
  // once, or kept for a split backward's W (kernels/weight_gradients.h).
  WeightGradients& weight_gradients() { return weight_gradients_; }
  int64_t NumElements() const;              // this rank's slices
  int64_t GlobalNumElements() const;        // the whole tensors of the parameters held here
  int64_t ExpertGlobalNumElements() const;  // the same, routed experts' only

 private:
  WeightGradients weight_gradients_;
  uint64_t seed_;
  Storage storage_;
  bool packed_ = false;
  std::deque<Parameter> parameters_;
  // How each parameter is initialised (registration order): in Add() on the
  // host, in its slot of the flat buffers in Pack() on a device.
  struct InitRecipe {
    Init init;
    double std;
  };
  std::vector<InitRecipe> inits_;
  absl::flat_hash_map<std::string, Parameter*> by_name_;  // Add is O(1): models have 10^4+ tensors
  std::vector<const Parameter*> slots_[2];  // dense, expert: by ascending flat_offset (Pack())
  Tensor flat_values_, flat_grads_, flat_compute_;
  Tensor expert_flat_values_, expert_flat_grads_, expert_flat_compute_;
};

// The local shape of `shard` of a tensor of `global_shape` (padding included).
Shape ShardShape(const Shape& global_shape, const TensorShard& shard);
// Flat index in the global tensor of element `local` of `shard`; -1 for padding.
int64_t ShardGlobalIndex(const Shape& global_shape, const TensorShard& shard, int64_t local);
// The leading elements of `shard`'s slice that hold global elements; the
// rest (dim 0 padding) hold none.
int64_t ShardRealElements(const Shape& global_shape, const TensorShard& shard);

}  // namespace tetra

#endif  // TETRA_MODEL_PARAMETERS_H_
