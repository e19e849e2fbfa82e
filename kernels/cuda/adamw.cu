// Multi-tensor AdamW on the device: one launch updates a list of parameter
// tensors (fp32 master weights, fp32 moments), with the CPU reference's
// arithmetic (torch.optim.AdamW: its lerp, scalars rounded to fp32 once), and
// optionally writes the bf16 compute copy of each updated weight.
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 65536;  // elements per block
constexpr int kMaxTensors = 48;    // per launch: the argument struct stays a few KB

struct AdamWTensorArgs {
  float* param;
  const float* grad;
  float* m;
  float* v;
  __nv_bfloat16* param_bf16;  // null: no compute copy
  int64_t n;
  float decay;  // 1 - lr * weight_decay, or 1
};

struct AdamWLaunch {
  AdamWTensorArgs tensors[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // prefix sums of chunks per tensor
  int count;
  float lerp_weight, beta2, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps;
};

__global__ void AdamWKernel(const __grid_constant__ AdamWLaunch launch) {
  int t = 0;
  while (t + 1 < launch.count && launch.first_chunk[t + 1] <= blockIdx.x) ++t;
  const AdamWTensorArgs& a = launch.tensors[t];
  const int64_t begin = (blockIdx.x - launch.first_chunk[t]) * kChunk;
  const int64_t end = min(a.n, begin + kChunk);
  const bool small_weight = fabsf(launch.lerp_weight) < 0.5f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = a.grad[i];
    float m = a.m[i];
    m = small_weight ? m + launch.lerp_weight * (g - m) : g - (g - m) * (1.0f - launch.lerp_weight);
    const float v = a.v[i] * launch.beta2 + launch.one_minus_beta2 * g * g;
    a.m[i] = m;
    a.v[i] = v;
    const float denom = sqrtf(v) / launch.bias_correction2_sqrt + launch.eps;
    const float p = a.param[i] * a.decay + launch.neg_step_size * m / denom;
    a.param[i] = p;
    if (a.param_bf16 != nullptr) a.param_bf16[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h) {
  TETRA_CHECK(h.step >= 1) << "AdamW step " << h.step << " (steps count from 1)";
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  AdamWLaunch launch = {};
  launch.lerp_weight = static_cast<float>(1.0 - h.beta1);
  launch.beta2 = static_cast<float>(h.beta2);
  launch.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  launch.neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  launch.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  launch.eps = static_cast<float>(h.eps);
  auto flush = [&] {
    if (launch.count == 0) return;
    const int64_t blocks = launch.first_chunk[launch.count];
    if (blocks > 0) {
      LaunchKernel(AdamWKernel, blocks, kThreads, 0, CurrentStream(), launch);
    }
    launch.count = 0;
  };
  for (const AdamWTensors& t : tensors) {
    for (const Tensor* x : {&t.param, &t.grad, &t.m, &t.v}) ExpectDevice(*x, "AdamW", "an operand");
    if (t.param_bf16.defined()) ExpectDevice(t.param_bf16, "AdamW", "param_bf16");
    const int64_t n = t.param.numel();
    const int i = launch.count;
    launch.tensors[i] = {t.param.f32(),
                         t.grad.f32(),
                         t.m.f32(),
                         t.v.f32(),
                         t.param_bf16.defined() ? t.param_bf16.data<__nv_bfloat16>() : nullptr,
                         n,
                         static_cast<float>(1.0 - h.lr * (t.decay ? h.weight_decay : 0.0))};
    launch.first_chunk[i + 1] = launch.first_chunk[i] + CeilDiv(n, kChunk);
    launch.count = i + 1;
    if (launch.count == kMaxTensors) flush();
  }
  flush();
}

}  // namespace tetra::cuda
