#include "kernels/cpu/embedding.h"

#include <cstring>

#include "core/logging.h"
#include "kernels/cpu/partition.h"

namespace tetra::cpu {
namespace {

// Which rows of the table a token maps to: the whole table (every id must
// fall inside) or one vocabulary shard of it (ids outside are skipped).
struct TableRange {
  int64_t begin;
  int64_t rows;
  bool sharded;

  // Row of tokens[i] in the table, or -1 for a token another shard owns.
  int64_t Row(const int32_t* tokens, int64_t i) const {
    const int64_t id = tokens[i];
    if (sharded) {
      TETRA_CHECK(id >= 0) << "token id " << id << " at " << i << " is negative";
    } else {
      TETRA_CHECK(id >= 0 && id < rows)
          << "token id " << id << " at " << i << " outside [0, " << rows << ")";
    }
    const int64_t row = id - begin;
    return row >= 0 && row < rows ? row : -1;
  }
};

void Lookup(const int32_t* tokens, int64_t n, const float* table, const TableRange& range,
            int64_t dim, float* out) {
#pragma omp parallel for schedule(static) if (n * dim >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = range.Row(tokens, i);
    if (row >= 0) {
      std::memcpy(out + i * dim, table + row * dim, dim * sizeof(float));
    } else {
      std::memset(out + i * dim, 0, dim * sizeof(float));
    }
  }
}

void Scatter(const int32_t* tokens, int64_t n, const float* dout, const TableRange& range,
             int64_t dim, float* dtable) {
#pragma omp parallel if (n * dim >= kMinParallelWork)
  {
    // Not a structured binding: clang 14 cannot use one inside the omp simd below.
    const std::pair<int64_t, int64_t> slice = ThreadSlice(dim);
    const int64_t begin = slice.first, end = slice.second;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = range.Row(tokens, i);
      if (row < 0) continue;
      float* dst = dtable + row * dim;
      const float* src = dout + i * dim;
#pragma omp simd
      for (int64_t j = begin; j < end; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace

void EmbeddingForward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                      int64_t dim, float* out) {
  Lookup(tokens, n, table, {0, vocab, /*sharded=*/false}, dim, out);
}

void EmbeddingBackward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                       int64_t dim, float* dtable) {
  Scatter(tokens, n, dout, {0, vocab, /*sharded=*/false}, dim, dtable);
}

void EmbeddingShardForward(const int32_t* tokens, int64_t n, const float* table,
                           int64_t vocab_begin, int64_t rows, int64_t dim, float* out) {
  Lookup(tokens, n, table, {vocab_begin, rows, /*sharded=*/true}, dim, out);
}

void EmbeddingShardBackward(const int32_t* tokens, int64_t n, const float* dout,
                            int64_t vocab_begin, int64_t rows, int64_t dim, float* dtable) {
  Scatter(tokens, n, dout, {vocab_begin, rows, /*sharded=*/true}, dim, dtable);
}

}  // namespace tetra::cpu
