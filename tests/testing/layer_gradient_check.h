// A model layer's gradients by finite differences, shared by the layer tests:
// in slot 0, y = forward(x), loss = sum(y * probe), backward(probe) -> dx,
// checked against central differences in x and in every parameter of `store`.
#ifndef TETRA_TESTS_TESTING_LAYER_GRADIENT_CHECK_H_
#define TETRA_TESTS_TESTING_LAYER_GRADIENT_CHECK_H_

#include <cstring>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "model/parameters.h"
#include "tests/testing/gradient_check.h"

namespace tetra::testing {

// A host fp32 tensor of N(0, scale^2) values from (stream).
inline Tensor RandomTensor(const Shape& shape, uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::Empty(shape);
  const std::vector<float> v = RandomVector(t.numel(), stream, scale);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

// `forward` runs the layer's forward in slot 0 on x and returns its output.
template <typename Layer>
void ExpectLayerGradients(Layer& layer, ParameterStore& store, const Shape& x_shape,
                          const std::function<Tensor(const Tensor&)>& forward,
                          const GradCheckOptions& tolerance) {
  Tensor x = RandomTensor(x_shape, 100);
  const std::vector<float> probe = RandomVector(x.numel(), 200);
  Tensor dy = Tensor::Empty(x_shape);
  std::memcpy(dy.raw(), probe.data(), dy.nbytes());
  store.ZeroGrads();
  forward(x);
  const Tensor dx = Tensor(layer.Backward(/*slot=*/0, dy)).Clone();
  const auto loss = [&] { return ProbeLoss(forward(x).f32(), probe); };
  ExpectGradientMatches("dx", x.f32(), x.numel(), dx.f32(), loss, tolerance);
  for (Parameter& p : store.all()) {
    const Tensor grad = p.grad.Clone();
    ExpectGradientMatches(p.name, p.value.f32(), p.value.numel(), grad.f32(), loss, tolerance);
  }
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_LAYER_GRADIENT_CHECK_H_
