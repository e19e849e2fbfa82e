// Softmax cross-entropy over the vocabulary, the reference arithmetic in one
// place: per row, the max logit, the sum of exp(logit - max) in double, the
// loss (max - target logit) + log(sum) and the gradient
// grad_scale x (exp(logit - max) x fp32(1 / sum) - onehot). The fused
// single-rank kernel runs the steps row by row (the (rows, vocab)
// probabilities are never stored beside the logits: the gradient can
// overwrite them in place); the vocabulary-parallel pieces run each step
// over all rows, so a tensor-parallel group can combine its slices' row
// maxima and sums between them, and give the same numbers.
#ifndef TETRA_KERNELS_CPU_CROSS_ENTROPY_H_
#define TETRA_KERNELS_CPU_CROSS_ENTROPY_H_

#include <algorithm>
#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// Logits rows may be padded (a vocabulary padded for tensor-core tiles):
// a row of `width` logits holding ids [vocab_begin, vocab_begin + width) of
// a vocabulary of vocab_size has RealColumns real ones, first; the columns
// past them are padding, left out of the max and the sum, gradient 0.
inline int64_t RealColumns(int64_t width, int64_t vocab_begin, int64_t vocab_size) {
  return std::clamp<int64_t>(vocab_size - vocab_begin, 0, width);
}

// logits (rows, width), columns [0, vocab_size) real (vocab_size <= width),
// targets (rows) in [0, vocab_size) or ignored (negative, kIgnoredTarget;
// checked: ids are validated
// when data is read, so a bad one here is a bug).
// Returns sum over rows of -log softmax(logits[r])[targets[r]], accumulated
// in double in row order (deterministic).
// dlogits (rows, width), when not null, is written with
// grad_scale * (softmax(logits) - onehot(targets)); it may equal logits.
// row_losses (rows), when not null, receives each row's loss.
double CrossEntropyForwardBackward(const float* logits, const int32_t* targets, int64_t rows,
                                   int64_t width, int64_t vocab_size, float grad_scale,
                                   float* dlogits, float* row_losses);

// The pieces, on logits (rows, width) holding ids [vocab_begin, vocab_begin +
// width), padding past vocab_size, targets (rows) in [0, vocab_size) or
// ignored (checked).
// row_max (rows): each row's largest logit (-inf on a slice of padding only);
// target_logit (rows): the row's target's logit where this slice holds it, else 0.
void CrossEntropyRowStats(const float* logits, const int32_t* targets, int64_t rows, int64_t width,
                          int64_t vocab_begin, int64_t vocab_size, float* row_max,
                          float* target_logit);
// sum_exp (rows) = sum over the row of exp(logit - row_max), in double.
void CrossEntropySumExp(const float* logits, const float* row_max, int64_t rows, int64_t width,
                        int64_t vocab_begin, int64_t vocab_size, double* sum_exp);
// Sum over rows not ignored of (row_max - target_logit) + log(sum_exp), in
// row order.
double CrossEntropyLoss(const int32_t* targets, const float* row_max, const float* target_logit,
                        const double* sum_exp, int64_t rows);
// dlogits (rows, width), may be logits: grad_scale x (exp(logit - row_max) x
// fp32(1 / sum_exp) - onehot(target)) on this slice; 0 on ignored rows.
void CrossEntropyGradient(const float* logits, const int32_t* targets, const float* row_max,
                          const double* sum_exp, int64_t rows, int64_t width, int64_t vocab_begin,
                          int64_t vocab_size, float grad_scale, float* dlogits);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_CROSS_ENTROPY_H_
