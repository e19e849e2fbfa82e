// Initial weights drawn from counter-based normals (NormalInit, op_types.h):
// the CPU reference of ops::FillNormal.
#ifndef TETRA_KERNELS_CPU_NORMAL_INIT_H_
#define TETRA_KERNELS_CPU_NORMAL_INIT_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// x[i] = float(std x Normal(global index of i)), i in [0, n).
void FillNormal(const NormalInit& init, int64_t n, float* x);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_NORMAL_INIT_H_
