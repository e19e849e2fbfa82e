// The CUDA ops' operand check: a host tensor handed to a device kernel would
// fault far from the cause, so each op names the operand that is not on the
// device.
#ifndef TETRA_KERNELS_CUDA_EXPECT_DEVICE_H_
#define TETRA_KERNELS_CUDA_EXPECT_DEVICE_H_

#include "core/tensor.h"

namespace tetra::cuda {

inline void ExpectDevice(const Tensor& t, const char* op, const char* name) {
  TETRA_CHECK(t.defined() && t.device() == DeviceType::kCUDA)
      << op << ": " << name << " is not a device tensor";
}

}  // namespace tetra::cuda

#endif  // TETRA_KERNELS_CUDA_EXPECT_DEVICE_H_
