// What the op API's definitions (kernels/ops_*.cc) share: where an op runs
// (the device of its tensors), its CUDA call, and the CPU kernels' fp32 view
// of bf16 tensors. Internal to kernels/.
#ifndef TETRA_KERNELS_OP_DISPATCH_H_
#define TETRA_KERNELS_OP_DISPATCH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/op_contracts.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"

namespace tetra::ops {

// An op runs where its output (or its first tensor) lives; the CPU kernels
// then check that the others are on the host too.
template <typename... Tensors>
void ExpectHost(const Tensors&... tensors) {
  TETRA_CHECK(((!tensors.defined() || tensors.device() == DeviceType::kCPU) && ...))
      << "a device tensor given to a host op (mixed devices)";
}

inline bool OnDevice(const Tensor& t) {
#if !TETRA_HAVE_CUDA
  TETRA_CHECK(t.device() == DeviceType::kCPU) << "device tensor in a build without CUDA";
#endif
  return t.device() == DeviceType::kCUDA;
}

// Runs an op on the device: `call` (a generic lambda calling a tetra::cuda
// function of kernels/cuda/cuda_ops.h) returns the op's result. The lambda
// is instantiated only here, so a build without CUDA, where no device tensor
// exists (OnDevice refuses one), names no CUDA function.
template <typename Result = void, typename Call>
Result OnCuda(const Call& call) {
#if TETRA_HAVE_CUDA
  return call(nullptr);
#else
  (void)call;
  TETRA_CHECK(false) << "a device op in a build without CUDA";
  return Result();
#endif
}

// The product of every dim but the last: a (rows, width) view's rows, also
// when the width is 0.
inline int64_t Rows(const Tensor& t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.rank(); ++d) rows *= t.dim(d);
  return rows;
}

// The CPU kernels compute in fp32 whatever the tensors hold, as the CUDA ones
// load bf16, compute in fp32 and store bf16: a bf16 operand is read through an
// fp32 copy, and a bf16 output is written to an fp32 copy (holding its values,
// for ops that accumulate) rounded back into it, nearest-even, when the op
// returns. fp32 operands are used in place; an undefined one is nullptr.
class HostF32 {
 public:
  HostF32() = default;
  HostF32(const HostF32&) = delete;
  HostF32& operator=(const HostF32&) = delete;
  ~HostF32() {
    for (auto& [narrow, wide] : outputs_) Cast(wide, narrow);
  }

  float* In(const Tensor& t) { return Wide(t, /*output=*/false); }
  float* Out(const Tensor& t) { return Wide(t, /*output=*/true); }

 private:
  float* Wide(const Tensor& t, bool output) {
    if (!t.defined()) return nullptr;
    TETRA_CHECK(t.device() == DeviceType::kCPU)
        << "a device tensor given to a host op (mixed devices)";
    if (t.dtype() == DType::kF32) return t.f32();
    TETRA_CHECK(t.dtype() == DType::kBF16)
        << "a host op on a " << DTypeName(t.dtype()) << " tensor";
    Tensor wide = Tensor::Empty(t.shape());
    Cast(t, wide);
    if (output) {
      outputs_.emplace_back(t, wide);
    } else {
      inputs_.push_back(wide);
    }
    return wide.f32();  // the storage lives on in inputs_ or outputs_
  }

  std::vector<Tensor> inputs_;                      // fp32 copies of bf16 inputs
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (bf16 output, its fp32 copy)
};

}  // namespace tetra::ops

#endif  // TETRA_KERNELS_OP_DISPATCH_H_
