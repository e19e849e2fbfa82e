#include "model/parameters.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

constexpr int64_t kSlotAlignment = 16;  // floats: 64 bytes, one AVX-512 line

// The extent `shard`'s dim is split into count equal slices of: the global
// one, or the padded one.
int64_t SplitExtent(const Shape& global_shape, const TensorShard& shard) {
  return shard.padded_extent > 0 ? shard.padded_extent : global_shape[shard.dim];
}

}  // namespace

Shape ShardShape(const Shape& global_shape, const TensorShard& shard) {
  Shape local = global_shape;
  if (shard.dim < 0) return local;
  TETRA_CHECK(shard.dim < static_cast<int>(local.size()) &&
              (shard.padded_extent == 0 || (shard.dim == 0 && shard.padded_extent >= local[0])) &&
              SplitExtent(global_shape, shard) % shard.count == 0 && 0 <= shard.index &&
              shard.index < shard.count)
      << "cannot take slice " << shard.index << " of " << shard.count << " along dim " << shard.dim
      << " of " << ShapeString(global_shape) << " padded to " << shard.padded_extent;
  local[shard.dim] = SplitExtent(global_shape, shard) / shard.count;
  return local;
}

int64_t ShardGlobalIndex(const Shape& global_shape, const TensorShard& shard, int64_t local) {
  if (shard.dim < 0) return local;
  // Row-major: split the local index around the shard dim, shift that coordinate.
  int64_t inner = 1;
  for (size_t d = shard.dim + 1; d < global_shape.size(); ++d) inner *= global_shape[d];
  const int64_t local_extent = SplitExtent(global_shape, shard) / shard.count;
  const int64_t outer = local / (local_extent * inner);
  const int64_t coordinate = local / inner % local_extent + shard.index * local_extent;
  if (coordinate >= global_shape[shard.dim]) return -1;  // a padding row
  return (outer * global_shape[shard.dim] + coordinate) * inner + local % inner;
}

int64_t ShardRealElements(const Shape& global_shape, const TensorShard& shard) {
  const Shape local = ShardShape(global_shape, shard);
  const int64_t n = NumElements(local);
  if (shard.padded_extent == 0) return n;
  // Padding is appended to dim 0 (checked in ShardShape): a prefix of rows is real.
  const int64_t rows = local[0];
  const int64_t real_rows = std::clamp<int64_t>(global_shape[0] - shard.index * rows, 0, rows);
  return n / rows * real_rows;
}

int64_t Parameter::GlobalIndex(int64_t local) const {
  return ShardGlobalIndex(global_shape, shard, local);
}

int64_t Parameter::RealElements() const { return ShardRealElements(global_shape, shard); }

namespace {

// The draws of `p`'s slice of its global tensor (its real elements: padding
// rows draw nothing).
NormalInit SliceInit(const Parameter& p, uint64_t seed, double std) {
  NormalInit init{.seed = seed, .stream = StableHash(p.name), .std = std};
  if (p.shard.dim < 0) {
    init.local_extent = init.global_extent = p.value.numel();
    return init;
  }
  for (size_t d = p.shard.dim + 1; d < p.global_shape.size(); ++d) init.inner *= p.global_shape[d];
  init.global_extent = p.global_shape[p.shard.dim];
  const int64_t slice_extent = p.value.dim(p.shard.dim);
  // Padding rows only ever follow the real ones along dim 0.
  init.local_extent = p.shard.padded_extent > 0 ? p.RealElements() / init.inner : slice_extent;
  init.offset = p.shard.index * slice_extent;
  return init;
}

// `value` (p's slice, fp32, on any device) initialised as `init` and `std`
// say; its padding (past p's real elements) 0.
void Initialize(const Tensor& value, const Parameter& p, uint64_t seed, Init init, double std) {
  const Tensor flat = value.Reshape({value.numel()});
  const int64_t real = p.RealElements();
  const Tensor held = flat.Slice(0, real);
  if (init == Init::kNormal) {
    ops::FillNormal(held, SliceInit(p, seed, std));
  } else {
    held.Fill(init == Init::kOnes ? 1.0f : 0.0f);
  }
  if (real < flat.numel()) flat.Slice(real, flat.numel()).SetZero();
}

}  // namespace

Parameter& ParameterStore::Add(std::string name, const Shape& global_shape, Init init, double std,
                               TensorShard shard, bool trainable) {
  TETRA_CHECK(!packed_) << "parameter " << name << " added after Pack()";
  const Shape local = ShardShape(global_shape, shard);
  // A device run's weights are drawn in their slots of the flat buffers
  // (Pack): on the GPU in milliseconds, with no host copy of them.
  const bool allocate =
      storage_ == Storage::kAllocated && CurrentPlacement().device == DeviceType::kCPU;
  parameters_.push_back(Parameter{name,
                                  allocate ? Tensor::Empty(local) : Tensor::Unallocated(local),
                                  allocate ? Tensor::Zeros(local) : Tensor::Unallocated(local),
                                  /*weight_decay=*/global_shape.size() >= 2, global_shape, shard});
  inits_.push_back({init, std});
  Parameter& p = parameters_.back();
  TETRA_CHECK(by_name_.emplace(std::move(name), &p).second)
      << "parameter " << p.name << " registered twice";
  p.trainable = trainable;
  p.compute = p.value;  // until Pack
  if (allocate) Initialize(p.value, p, seed_, init, std);
  return p;
}

void ParameterStore::Pack(int64_t total_multiple, int64_t expert_total_multiple) {
  TETRA_CHECK(!packed_) << "the parameters are packed twice";
  packed_ = true;
  int64_t totals[2] = {0, 0};  // dense, expert
  for (Parameter& p : parameters_) {
    int64_t& total = totals[p.expert];
    p.flat_offset = total;
    slots_[p.expert].push_back(&p);
    total += (p.value.numel() + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  if (storage_ == Storage::kShapesOnly) return;
  const int64_t multiples[2] = {total_multiple, expert_total_multiple};
  const Placement& placement = CurrentPlacement();
  for (int expert = 0; expert < 2; ++expert) {
    const int64_t padded =
        (totals[expert] + multiples[expert] - 1) / multiples[expert] * multiples[expert];
    (expert ? expert_flat_values_ : flat_values_) =
        Tensor::Zeros({padded}, DType::kF32, placement.device);
    (expert ? expert_flat_grads_ : flat_grads_) =
        Tensor::Zeros({padded}, DType::kF32, placement.device);
    if (placement.compute != DType::kF32) {
      (expert ? expert_flat_compute_ : flat_compute_) =
          Tensor::Zeros({padded}, placement.compute, placement.device);
    }
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = parameters_[i];
    const int64_t end = p.flat_offset + p.value.numel();
    const Tensor& values = p.expert ? expert_flat_values_ : flat_values_;
    const Tensor& grads = p.expert ? expert_flat_grads_ : flat_grads_;
    Tensor value = values.Slice(p.flat_offset, end).Reshape(p.value.shape());
    if (p.value.defined()) {
      value.CopyFrom(p.value);
    } else {  // a device run's: drawn here
      Initialize(value, p, seed_, inits_[i].init, inits_[i].std);
    }
    p.value = value;
    Tensor grad = grads.Slice(p.flat_offset, end).Reshape(p.grad.shape());
    if (p.grad.defined()) grad.CopyFrom(p.grad);  // else still the buffer's zeros
    p.grad = grad;
    const Tensor& compute = p.expert ? expert_flat_compute_ : flat_compute_;
    p.compute =
        compute.defined() ? compute.Slice(p.flat_offset, end).Reshape(p.value.shape()) : p.value;
  }
  RefreshCompute();
}

void ParameterStore::RefreshCompute() {
  if (flat_compute_.defined()) ops::Cast(flat_values_, flat_compute_);
  if (expert_flat_compute_.numel() > 0) ops::Cast(expert_flat_values_, expert_flat_compute_);
}

Parameter* ParameterStore::Find(std::string_view name) {
  auto it = by_name_.find(absl::string_view(name.data(), name.size()));
  return it == by_name_.end() ? nullptr : it->second;
}

std::optional<StackedParameters> ParameterStore::Stacked(
    std::initializer_list<const Parameter*> params) const {
  if (!packed_ || storage_ == Storage::kShapesOnly || params.size() == 0) return std::nullopt;
  const Parameter& first = **params.begin();
  Shape shape = first.value.shape();
  if (shape.empty()) return std::nullopt;
  shape[0] = 0;
  int64_t end = first.flat_offset;
  for (const Parameter* p : params) {
    auto it = by_name_.find(p->name);
    TETRA_CHECK(it != by_name_.end() && it->second == p)
        << "parameter " << p->name << " is not one of this store's";
    const Shape& s = p->value.shape();
    if (p->expert != first.expert || p->flat_offset != end || s.size() != shape.size() ||
        !std::equal(s.begin() + 1, s.end(), shape.begin() + 1)) {
      return std::nullopt;
    }
    shape[0] += s[0];
    end += p->value.numel();
  }
  const auto view = [&](const Tensor& flat) {
    return flat.Slice(first.flat_offset, end).Reshape(shape);
  };
  const Tensor& compute = first.expert ? expert_flat_compute_ : flat_compute_;
  StackedParameters stacked{.value = view(first.expert ? expert_flat_values_ : flat_values_),
                            .grad = view(first.expert ? expert_flat_grads_ : flat_grads_)};
  stacked.compute = compute.defined() ? view(compute) : stacked.value;
  return stacked;
}

const Parameter& ParameterStore::AtFlatOffset(int64_t offset, bool expert) const {
  const std::vector<const Parameter*>& slots = slots_[expert];
  auto it = std::upper_bound(slots.begin(), slots.end(), offset,
                             [](int64_t o, const Parameter* p) { return o < p->flat_offset; });
  TETRA_CHECK(it != slots.begin() && offset < (*(it - 1))->flat_offset + (*(it - 1))->value.numel())
      << (expert ? "expert " : "") << "flat element " << offset << " lies in no parameter";
  return **(it - 1);
}

void ParameterStore::ZeroGrads() {
  if (flat_grads_.defined()) {
    flat_grads_.SetZero();
    expert_flat_grads_.SetZero();
    return;
  }
  for (Parameter& p : parameters_) p.grad.SetZero();
}

int64_t ParameterStore::NumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += p.value.numel();
  return n;
}

int64_t ParameterStore::ExpertGlobalNumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += p.expert ? tetra::NumElements(p.global_shape) : 0;
  return n;
}

int64_t ParameterStore::GlobalNumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += tetra::NumElements(p.global_shape);
  return n;
}

}  // namespace tetra
