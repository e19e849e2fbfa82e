#include "kernels/cpu/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>

extern "C" void openblas_set_num_threads(int num_threads);

namespace tetra::cpu {

void SetCpuThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int CpuThreads() { return omp_get_max_threads(); }

int AffinityCores() {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof(mask), &mask) == 0 ? std::max(1, CPU_COUNT(&mask)) : 1;
}

}  // namespace tetra::cpu
