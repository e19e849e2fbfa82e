// The optimizer ops of the op API (kernels/ops.h): AdamW, the gradient norm's
// sums and clipping.
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/reduce.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper) {
  CheckAdamW({param, grad, m, v, Tensor(), true});
  const OpTimer op_timer(__func__, param.device());
  if (OnDevice(param))
    return OnCuda([&](auto) {
      return cuda::AdamWMultiTensor({AdamWTensors{param, grad, m, v, Tensor(), true}}, hyper);
    });
  ExpectHost(param);
  HostF32 f32;
  cpu::AdamWUpdate(f32.Out(param), f32.In(grad), f32.Out(m), f32.Out(v), param.numel(), hyper);
}

double SumOfSquares(const Tensor& x) {
  CheckFloat("sum of squares", x);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda<double>([&](auto) { return cuda::SumOfSquares(x); });
  ExpectHost(x);
  HostF32 f32;
  return cpu::SumOfSquares(f32.In(x), x.numel());
}

double WeightedSumOfSquares(const std::vector<Tensor>& xs, const std::vector<double>& weights) {
  TETRA_CHECK(xs.size() == weights.size()) << "weighted sum of squares of " << xs.size()
                                           << " tensors with " << weights.size() << " weights";
  for (const Tensor& x : xs) {
    TETRA_CHECK(x.dtype() == DType::kF32 && x.device() == xs.front().device())
        << "weighted sum of squares of a " << DTypeName(x.dtype())
        << " tensor: fp32 tensors on one device expected";
  }
  if (xs.empty()) return 0.0;
  const OpTimer op_timer(__func__, xs.front().device());
  if (OnDevice(xs.front()))
    return OnCuda<double>([&](auto) { return cuda::WeightedSumOfSquares(xs, weights); });
  std::vector<const float*> data;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    data.push_back(x.f32());
    sizes.push_back(x.numel());
  }
  return cpu::WeightedSumOfSquares(data, sizes, weights);
}

void Scale(const Tensor& x, float factor) {
  CheckFloat("scale", x);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Scale(x, factor); });
  ExpectHost(x);
  HostF32 f32;
  cpu::Scale(f32.Out(x), x.numel(), factor);
}

void ScaleMultiTensor(const std::vector<Tensor>& xs, float factor) {
  for (const Tensor& x : xs) {
    TETRA_CHECK(x.dtype() == DType::kF32 && x.device() == xs.front().device())
        << "multi-tensor scale of a " << DTypeName(x.dtype())
        << " tensor: fp32 tensors on one device expected";
  }
  if (xs.empty()) return;
  const OpTimer op_timer(__func__, xs.front().device());
  if (OnDevice(xs.front())) return OnCuda([&](auto) { return cuda::ScaleMultiTensor(xs, factor); });
  for (const Tensor& x : xs) cpu::Scale(x.f32(), x.numel(), factor);
}

void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper) {
  if (tensors.empty()) return;
  for (const AdamWTensors& t : tensors) CheckAdamW(t);
  const OpTimer op_timer(__func__, tensors.front().param.device());
  if (OnDevice(tensors.front().param))
    return OnCuda([&](auto) { return cuda::AdamWMultiTensor(tensors, hyper); });
  for (const AdamWTensors& t : tensors) {
    ExpectHost(t.param);
    AdamWHyper h = hyper;
    if (!t.decay) h.weight_decay = 0.0;
    cpu::AdamWUpdate(t.param.f32(), t.grad.f32(), t.m.f32(), t.v.f32(), t.param.numel(), h);
    if (t.param_bf16.defined()) Cast(t.param, t.param_bf16);
  }
}

}  // namespace tetra::ops
