// The RMSNorm ops of the op API (kernels/ops.h).
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  CheckRmsNorm(x, w, y, rstd);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::RmsNorm(x, w, eps, y, rstd); });
  ExpectHost(x);
  HostF32 f32;
  cpu::RmsNormForward(f32.In(x), f32.In(w), Rows(x), x.dim(-1), eps, f32.Out(y), f32.Out(rstd));
}

void AddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& sum,
                const Tensor& y, const Tensor& rstd) {
  CheckAddRmsNorm(x, delta, w, sum, y, rstd);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda([&](auto) { return cuda::AddRmsNorm(x, delta, w, eps, sum, y, rstd); });
  ExpectHost(x, delta, sum);
  HostF32 f32;
  cpu::AddRmsNormForward(f32.In(x), f32.In(delta), f32.In(w), Rows(x), x.dim(-1), eps,
                         sum.dtype() == DType::kBF16, f32.Out(sum), f32.Out(y), f32.Out(rstd));
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& dx_add) {
  CheckRmsNormBackward(dy, x, w, rstd, dx, dw, dx_add);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda([&](auto) { return cuda::RmsNormBackward(dy, x, w, rstd, dx, dw, dx_add); });
  ExpectHost(x, dx_add);
  HostF32 f32;
  cpu::RmsNormBackward(f32.In(dy), f32.In(x), f32.In(w), f32.In(rstd), Rows(x), x.dim(-1),
                       f32.Out(dx), f32.Out(dw), f32.In(dx_add),
                       dx.defined() && dx.dtype() == DType::kBF16);
}

}  // namespace tetra::ops
