#include "kernels/cpu/bias.h"

#include "kernels/cpu/partition.h"

namespace tetra::cpu {

void AddBias(const float* bias, int64_t rows, int64_t width, float* y) {
#pragma omp parallel for if (rows * width >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * width;
    for (int64_t c = 0; c < width; ++c) row[c] += bias[c];
  }
}

void BiasGradient(const float* dy, int64_t rows, int64_t width, float* dbias) {
#pragma omp parallel for if (rows * width >= kMinParallelWork)
  for (int64_t c = 0; c < width; ++c) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * width + c];
    dbias[c] += sum;
  }
}

}  // namespace tetra::cpu
