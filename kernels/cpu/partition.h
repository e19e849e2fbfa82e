// How the CPU kernels split work over OpenMP threads: a size below which a
// parallel region costs more than it saves, and column slices for reductions
// whose result must not depend on the thread count (each thread owns a slice
// of columns and walks the rows in order, so every output element sums its
// terms in one fixed order).
#ifndef TETRA_KERNELS_CPU_PARTITION_H_
#define TETRA_KERNELS_CPU_PARTITION_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace tetra::cpu {

// Elements a kernel must touch before it forks threads (`omp parallel ...
// if (work >= kMinParallelWork)`): ~10 us of streaming work, above the cost of
// waking a team, which grows when the cores are shared.
constexpr int64_t kMinParallelWork = 1 << 15;

// The calling OpenMP thread's slice [begin, end) of [0, n), split into equal
// runs of whole `align`-element blocks (align 16 floats = one 64-byte cache
// line, so threads never write the same line). Call inside `omp parallel`.
inline std::pair<int64_t, int64_t> ThreadSlice(int64_t n, int64_t align = 16) {
  const int64_t threads = omp_get_num_threads();
  const int64_t blocks = (n + align - 1) / align;
  const int64_t per_thread = (blocks + threads - 1) / threads;
  const int64_t begin = std::min(n, omp_get_thread_num() * per_thread * align);
  const int64_t end = std::min(n, begin + per_thread * align);
  return {begin, end};
}

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_PARTITION_H_
