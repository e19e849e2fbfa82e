// CPU thread count for OpenMP loops and OpenBLAS: all cores for one process,
// one thread per rank when several ranks share a machine.
#ifndef TETRA_KERNELS_CPU_THREADS_H_
#define TETRA_KERNELS_CPU_THREADS_H_

namespace tetra::cpu {

// Sets both OpenMP's and OpenBLAS's thread count.
void SetCpuThreads(int threads);
int CpuThreads();

// The cores this process may run on: its affinity mask, which honours cgroup
// cpusets and mpirun's binding (at least 1).
int AffinityCores();

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_THREADS_H_
