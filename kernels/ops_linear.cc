// The linear ops of the op API (kernels/ops.h): the GEMMs and their biases.
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>

#include "kernels/cpu/bias.h"
#include "kernels/cpu/gemm.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void Linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  CheckLinear(x, w, y);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Linear(x, w, y); });
  ExpectHost(x);
  HostF32 f32;
  cpu::LinearForward(f32.In(x), f32.In(w), rows, in, out, f32.Out(y));
}

void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx, int64_t real_out) {
  if (real_out < 0) real_out = w.dim(0);
  CheckLinearBackward(dy, x, w, dx, dw, real_out);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda(
        [&](auto) { return cuda::LinearBackward(dy, x, w, dx, dw, accumulate_dx, real_out); });
  ExpectHost(dy);
  HostF32 f32;
  cpu::LinearBackward(f32.In(dy), f32.In(x), f32.In(w), rows, in, real_out, out, f32.Out(dx),
                      f32.Out(dw), accumulate_dx);
}

void AddBias(const Tensor& bias, const Tensor& y) {
  CheckAddBias(bias, y);
  const OpTimer op_timer(__func__, y.device());
  if (OnDevice(y)) return OnCuda([&](auto) { return cuda::AddBias(bias, y); });
  ExpectHost(y, bias);
  HostF32 f32;
  cpu::AddBias(f32.In(bias), Rows(y), y.dim(-1), f32.Out(y));
}

void BiasGradient(const Tensor& dy, const Tensor& dbias) {
  CheckBiasGradient(dy, dbias);
  const OpTimer op_timer(__func__, dy.device());
  if (OnDevice(dy)) return OnCuda([&](auto) { return cuda::BiasGradient(dy, dbias); });
  ExpectHost(dy, dbias);
  HostF32 f32;
  cpu::BiasGradient(f32.In(dy), Rows(dy), dy.dim(-1), dbias.f32());
}

}  // namespace tetra::ops
