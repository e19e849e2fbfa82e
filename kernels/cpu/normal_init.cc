#include "kernels/cpu/normal_init.h"

#include "core/philox.h"

namespace tetra::cpu {
namespace {
constexpr int64_t kMinParallel = 1 << 14;  // elements: below, threads cost more than they save
}  // namespace

void FillNormal(const NormalInit& init, int64_t n, float* x) {
  const CounterRng rng(init.seed, init.stream);
  const int64_t step = init.local_extent * init.inner;
  // Each element depends on (seed, stream, global index) alone, so threads
  // split the elements without changing a bit (a 1B model's Box-Muller
  // draws take about a minute on one core).
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t outer = i / step, within = i % step;
    const int64_t g = (outer * init.global_extent + init.offset) * init.inner + within;
    x[i] = static_cast<float>(init.std * rng.Normal(static_cast<uint64_t>(g)));
  }
}

}  // namespace tetra::cpu
