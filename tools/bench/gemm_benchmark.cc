// The machine's SGEMM peak through OpenBLAS (the roofline for CPU GFLOP/s):
// C = A B for square fp32 matrices, with the threads given by --threads.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"

namespace {

void BM_Sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  tetra::cpu::SetCpuThreads(static_cast<int>(state.range(1)));
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  for (auto _ : state) {
    tetra::cpu::Gemm(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)
    ->ArgsProduct({{512, 1024, 2048}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
