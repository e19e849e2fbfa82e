#include "kernels/cpu/threads.h"

#include <omp.h>

extern "C" void openblas_set_num_threads(int num_threads);

namespace tetra::cpu {

void SetCpuThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int CpuThreads() { return omp_get_max_threads(); }

}  // namespace tetra::cpu
