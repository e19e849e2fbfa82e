// Token cross-entropy over logits split by vocabulary across the tensor-
// parallel group (Megatron-LM's vocab_parallel_cross_entropy): with the
// vocabulary padded to Vp (a multiple of tp), rank r holds the (N, Vp/tp)
// logits of ids [r*Vp/tp, (r+1)*Vp/tp), those from V on padding left out
// of the softmax, and the full (N, V) logits are never gathered. The local steps are the op API's
// cross-entropy pieces (kernels/ops.h), the arithmetic of the single-rank
// cross-entropy; between them, three reductions over the group: the row max
// (all-reduce max), the target logit from the rank that owns the target
// (all-reduce sum, exact: one non-zero term), and the sum of exp(logit -
// max) (each rank's fp64 partial sums all-gathered and added in rank order,
// so every rank gets the same bits).
#ifndef TETRA_PARALLEL_VOCAB_PARALLEL_CROSS_ENTROPY_H_
#define TETRA_PARALLEL_VOCAB_PARALLEL_CROSS_ENTROPY_H_

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tetra {

// logits (N, Vp/tp): this rank's vocabulary slice; targets (N) int32 global
// ids in [0, vocab_size), on the logits' device. Returns the sum over the N
// rows of -log softmax(row)[target], the same on every rank of `tp`. dlogits
// (N, Vp/tp), when defined, receives this rank's slice of grad_scale *
// (softmax - onehot(target)), 0 for padding; it may be logits itself. With a
// group of one rank this is ops::CrossEntropy.
double VocabParallelCrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                                 const Tensor& dlogits, Communicator& tp, int64_t vocab_size);

}  // namespace tetra

#endif  // TETRA_PARALLEL_VOCAB_PARALLEL_CROSS_ENTROPY_H_
