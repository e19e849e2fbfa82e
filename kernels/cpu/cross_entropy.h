// Softmax cross-entropy over the vocabulary fused with its gradient, so the
// (rows, vocab) probabilities are never stored beside the logits: the gradient
// can overwrite the logits in place.
#ifndef TETRA_KERNELS_CPU_CROSS_ENTROPY_H_
#define TETRA_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

namespace tetra::cpu {

// logits (rows, vocab), targets (rows) in [0, vocab) (checked: ids are
// validated when data is read, so a bad one here is a bug).
// Returns sum over rows of -log softmax(logits[r])[targets[r]], each row's
// log-sum-exp taken after subtracting the row max, accumulated in double in
// row order (deterministic).
// dlogits (rows, vocab), when not null, is written with
// grad_scale * (softmax(logits) - onehot(targets)); it may equal logits.
// row_losses (rows), when not null, receives each row's loss.
double CrossEntropyForwardBackward(const float* logits, const int32_t* targets, int64_t rows,
                                   int64_t vocab, float grad_scale, float* dlogits,
                                   float* row_losses);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_CROSS_ENTROPY_H_
