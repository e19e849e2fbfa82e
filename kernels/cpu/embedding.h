// Token embedding lookup and its gradient: out[i] = table[tokens[i]], over the
// whole table or over one vocabulary shard of it (tensor parallelism).
#ifndef TETRA_KERNELS_CPU_EMBEDDING_H_
#define TETRA_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>

namespace tetra::cpu {

// out (n, dim) = table[tokens] with table (vocab, dim). Ids are validated when
// data is read; the check here that every id is in [0, vocab) guards memory,
// so a failure is a bug.
void EmbeddingForward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                      int64_t dim, float* out);

// dtable (vocab, dim) += scatter of dout (n, dim) by tokens, accumulated; ids
// checked as in the forward.
// Threads split the dim columns, so each element sums its rows in token order:
// bit-identical run to run and for any thread count, with no atomics.
void EmbeddingBackward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                       int64_t dim, float* dtable);

// Vocabulary-parallel forms: `table` (rows, dim) holds ids [vocab_begin,
// vocab_begin + rows) of a larger vocabulary. A token outside that range
// gives a zero row of out and adds nothing to dtable (another rank owns it);
// negative ids are a bug (checked).
void EmbeddingShardForward(const int32_t* tokens, int64_t n, const float* table,
                           int64_t vocab_begin, int64_t rows, int64_t dim, float* out);
void EmbeddingShardBackward(const int32_t* tokens, int64_t n, const float* dout,
                            int64_t vocab_begin, int64_t rows, int64_t dim, float* dtable);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_EMBEDDING_H_
