#include "model/parameters.h"

#include <cstring>

#include "core/philox.h"

namespace tetra {

Parameter& ParameterStore::Add(std::string name, const Shape& shape, Init init, double std) {
  TETRA_CHECK(Find(name) == nullptr) << "parameter " << name << " registered twice";
  Tensor value = Tensor::Empty(shape);
  float* v = value.f32();
  if (init == Init::kOnes) {
    value.Fill(1.0f);
  } else {
    CounterRng rng(seed_, StableHash(name));
    for (int64_t i = 0; i < value.numel(); ++i) v[i] = static_cast<float>(std * rng.Normal(i));
  }
  parameters_.push_back(
      Parameter{std::move(name), value, Tensor::Zeros(shape), /*weight_decay=*/shape.size() >= 2});
  return parameters_.back();
}

Parameter* ParameterStore::Find(std::string_view name) {
  for (Parameter& p : parameters_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void ParameterStore::ZeroGrads() {
  for (Parameter& p : parameters_) std::memset(p.grad.raw(), 0, p.grad.nbytes());
}

int64_t ParameterStore::NumElements() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += p.value.numel();
  return n;
}

}  // namespace tetra
