#include "model/parameters.h"

#include <cstring>

#include "core/philox.h"
#include "kernels/ops.h"

namespace tetra {
namespace {
constexpr int64_t kSlotAlignment = 16;  // floats: 64 bytes, one AVX-512 line
}  // namespace

Shape ShardShape(const Shape& global_shape, const TensorShard& shard) {
  Shape local = global_shape;
  if (shard.dim < 0) return local;
  TETRA_CHECK(shard.dim < static_cast<int>(local.size()) && local[shard.dim] % shard.count == 0 &&
              0 <= shard.index && shard.index < shard.count)
      << "cannot take slice " << shard.index << " of " << shard.count << " along dim " << shard.dim
      << " of " << ShapeString(global_shape);
  local[shard.dim] /= shard.count;
  return local;
}

int64_t ShardGlobalIndex(const Shape& global_shape, const TensorShard& shard, int64_t local) {
  if (shard.dim < 0) return local;
  // Row-major: split the local index around the shard dim, shift that coordinate.
  int64_t inner = 1;
  for (size_t d = shard.dim + 1; d < global_shape.size(); ++d) inner *= global_shape[d];
  const int64_t local_extent = global_shape[shard.dim] / shard.count;
  const int64_t outer = local / (local_extent * inner);
  const int64_t coordinate = local / inner % local_extent + shard.index * local_extent;
  return (outer * global_shape[shard.dim] + coordinate) * inner + local % inner;
}

int64_t Parameter::GlobalIndex(int64_t local) const {
  return ShardGlobalIndex(global_shape, shard, local);
}

Parameter& ParameterStore::Add(std::string name, const Shape& global_shape, Init init, double std,
                               TensorShard shard) {
  TETRA_CHECK(Find(name) == nullptr) << "parameter " << name << " registered twice";
  TETRA_CHECK(!flat_values_.defined()) << "parameter " << name << " added after Pack()";
  const Shape local = ShardShape(global_shape, shard);
  parameters_.push_back(Parameter{std::move(name), Tensor::Empty(local), Tensor::Zeros(local),
                                  /*weight_decay=*/global_shape.size() >= 2, global_shape, shard});
  Parameter& p = parameters_.back();
  p.compute = p.value;  // until Pack
  if (init == Init::kOnes) {
    p.value.Fill(1.0f);
  } else {
    CounterRng rng(seed_, StableHash(p.name));
    float* v = p.value.f32();
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      v[i] = static_cast<float>(std * rng.Normal(p.GlobalIndex(i)));
    }
  }
  return p;
}

void ParameterStore::Pack(int64_t total_multiple) {
  int64_t total = 0;
  for (Parameter& p : parameters_) {
    p.flat_offset = total;
    total += (p.value.numel() + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  total = (total + total_multiple - 1) / total_multiple * total_multiple;
  const Placement& placement = CurrentPlacement();
  flat_values_ = Tensor::Zeros({total}, DType::kF32, placement.device);
  flat_grads_ = Tensor::Zeros({total}, DType::kF32, placement.device);
  if (placement.compute != DType::kF32) {
    flat_compute_ = Tensor::Zeros({total}, placement.compute, placement.device);
  }
  for (Parameter& p : parameters_) {
    const int64_t end = p.flat_offset + p.value.numel();
    Tensor value = flat_values_.Slice(p.flat_offset, end).Reshape(p.value.shape());
    value.CopyFrom(p.value);
    p.value = value;
    Tensor grad = flat_grads_.Slice(p.flat_offset, end).Reshape(p.grad.shape());
    grad.CopyFrom(p.grad);
    p.grad = grad;
    p.compute = flat_compute_.defined()
                    ? flat_compute_.Slice(p.flat_offset, end).Reshape(p.value.shape())
                    : p.value;
  }
  RefreshCompute();
}

void ParameterStore::RefreshCompute() {
  if (flat_compute_.defined()) ops::Cast(flat_values_, flat_compute_);
}

Parameter* ParameterStore::Find(std::string_view name) {
  for (Parameter& p : parameters_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void ParameterStore::ZeroGrads() {
  if (flat_grads_.defined()) {
    flat_grads_.SetZero();
    return;
  }
  for (Parameter& p : parameters_) std::memset(p.grad.raw(), 0, p.grad.nbytes());
}

int64_t ParameterStore::NumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += p.value.numel();
  return n;
}

int64_t ParameterStore::GlobalNumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += tetra::NumElements(p.global_shape);
  return n;
}

}  // namespace tetra
