#include "kernels/cpu/embedding.h"

#include <cstring>

#include "core/logging.h"
#include "kernels/cpu/partition.h"

namespace tetra::cpu {
namespace {

void CheckToken(const int32_t* tokens, int64_t i, int64_t vocab) {
  TETRA_CHECK(tokens[i] >= 0 && tokens[i] < vocab)
      << "token id " << tokens[i] << " at " << i << " outside [0, " << vocab << ")";
}

}  // namespace

void EmbeddingForward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                      int64_t dim, float* out) {
#pragma omp parallel for schedule(static) if (n * dim >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    CheckToken(tokens, i, vocab);
    std::memcpy(out + i * dim, table + tokens[i] * dim, dim * sizeof(float));
  }
}

void EmbeddingBackward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                       int64_t dim, float* dtable) {
#pragma omp parallel if (n * dim >= kMinParallelWork)
  {
    const auto [begin, end] = ThreadSlice(dim);
    for (int64_t i = 0; i < n; ++i) {
      CheckToken(tokens, i, vocab);
      float* dst = dtable + tokens[i] * dim;
      const float* src = dout + i * dim;
#pragma omp simd
      for (int64_t j = begin; j < end; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace tetra::cpu
