// Multi-tensor AdamW on the device against the CPU update over three steps:
// a tensor with weight decay, one without, one spanning several blocks, and
// the bf16 compute copy.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/cuda/gpu_test_util.h"

namespace tetra {
namespace {

using testing::Tolerance;

// The same fp32 formulas and scalars; the GPU may fuse multiply-adds (FMA),
// a difference of an ulp or two per step.
constexpr Tolerance kTol{1e-7, 2e-6};

TEST(AdamWGpuTest, MultiTensorMatchesCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {{31, 17}, {300}, {70001}};
  std::vector<AdamWTensors> host, device;
  for (size_t i = 0; i < shapes.size(); ++i) {
    AdamWTensors h{.param = testing::HostRandom(shapes[i], 10 * i + 1),
                   .grad = testing::HostRandom(shapes[i], 10 * i + 2),
                   .m = testing::HostRandom(shapes[i], 10 * i + 3, 0.1f),
                   .v = testing::HostRandom(shapes[i], 10 * i + 4, 0.1f),
                   .param_bf16 = Tensor::Empty(shapes[i], DType::kBF16),
                   .decay = i != 1};
    for (int64_t j = 0; j < h.v.numel(); ++j) h.v.f32()[j] *= h.v.f32()[j];  // v >= 0
    AdamWTensors d{.param = testing::ToDevice(h.param),
                   .grad = testing::ToDevice(h.grad),
                   .m = testing::ToDevice(h.m),
                   .v = testing::ToDevice(h.v),
                   .param_bf16 = Tensor::Empty(shapes[i], DType::kBF16, DeviceType::kCUDA),
                   .decay = h.decay};
    host.push_back(h);
    device.push_back(d);
  }
  AdamWHyper hyper{.lr = 1e-2, .weight_decay = 0.1};
  for (int64_t step = 1; step <= 3; ++step) {
    hyper.step = step;
    ops::AdamWMultiTensor(host, hyper);
    ops::AdamWMultiTensor(device, hyper);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(ShapeString(shapes[i]));
    const Tensor param = testing::ToHostF32(device[i].param);
    testing::ExpectClose("param", param, host[i].param, kTol);
    testing::ExpectClose("m", testing::ToHostF32(device[i].m), host[i].m, kTol);
    testing::ExpectClose("v", testing::ToHostF32(device[i].v), host[i].v, kTol);
    // The bf16 copy is the device's own fp32 result, rounded: exact.
    testing::ExpectClose("param_bf16", testing::ToHostF32(device[i].param_bf16),
                         testing::RoundTo(param, DType::kBF16), {0.0, 0.0});
  }
}

}  // namespace
}  // namespace tetra
