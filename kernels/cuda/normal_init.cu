// Initial weights on the device (ops::FillNormal): the same Philox4x32-10
// draws and Box-Muller in double as the CPU (core/philox.cc), so the 32-bit
// integer part is bit for bit and the double log/cos agree to an ulp or two:
// after rounding to fp32 the weights equal the CPU's but for a rare last
// bit. A billion weights take milliseconds here against a minute per CPU core.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// core/philox.cc's Philox4x32 with its constants, on 32-bit words.
__device__ __forceinline__ void Philox(uint32_t (&ctr)[4], uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, ctr[0]), lo0 = 0xD2511F53u * ctr[0];
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, ctr[2]), lo1 = 0xCD9E8D57u * ctr[2];
    const uint32_t next[4] = {hi1 ^ ctr[1] ^ key0, lo1, hi0 ^ ctr[3] ^ key1, lo0};
    for (int w = 0; w < 4; ++w) ctr[w] = next[w];
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

__global__ void FillNormalKernel(NormalInit init, int64_t n, float* x) {
  const int64_t step = init.local_extent * init.inner;
  const uint32_t key0 = static_cast<uint32_t>(init.seed),
                 key1 = static_cast<uint32_t>(init.seed >> 32);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t outer = i / step, within = i % step;
    const uint64_t g =
        static_cast<uint64_t>((outer * init.global_extent + init.offset) * init.inner + within);
    uint32_t ctr[4] = {static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                       static_cast<uint32_t>(init.stream),
                       static_cast<uint32_t>(init.stream >> 32)};
    Philox(ctr, key0, key1);
    // UniformOpen (core/philox.h): never 0, so log is finite.
    const double u1 = (ctr[0] + 0.5) * (1.0 / 4294967296.0);
    const double u2 = (ctr[1] + 0.5) * (1.0 / 4294967296.0);
    const double normal = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    x[i] = static_cast<float>(init.std * normal);
  }
}

}  // namespace

void FillNormal(const Tensor& x, const NormalInit& init) {
  ExpectDevice(x, "FillNormal", "x");
  if (x.numel() == 0) return;
  LaunchKernel(FillNormalKernel, GridFor(x.numel(), kThreads), kThreads, 0, CurrentStream(), init,
               x.numel(), x.f32());
}

}  // namespace tetra::cuda
