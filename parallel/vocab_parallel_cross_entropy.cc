#include "parallel/vocab_parallel_cross_entropy.h"

#include "core/logging.h"
#include "core/profiler.h"
#include "kernels/ops.h"

namespace tetra {

double VocabParallelCrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                                 const Tensor& dlogits, Communicator& tp, int64_t vocab_size) {
  if (tp.size() == 1) return ops::CrossEntropy(logits, targets, grad_scale, dlogits, vocab_size);
  const int64_t width = logits.dim(-1), rows = logits.numel() / width;
  const int64_t begin = tp.rank() * width;
  TETRA_CHECK(vocab_size > 0 && vocab_size <= width * tp.size())
      << "a vocabulary of " << vocab_size << " in " << tp.size() << " slices of " << width;
  const DeviceType device = logits.device();
  Tensor row_max = Tensor::Empty({rows}, DType::kF32, device);
  Tensor target_logit = Tensor::Empty({rows}, DType::kF32, device);
  ops::CrossEntropyRowStats(logits, targets, begin, vocab_size, row_max, target_logit);
  CommHandle max_done = tp.AllReduceAsync(row_max, row_max, ReduceOp::kMax);
  CommHandle target_done = tp.AllReduceAsync(target_logit, target_logit, ReduceOp::kSum);
  {
    const ScopedSpan span(SpanKind::kCommTp, "all_reduce tp (cross-entropy)");
    max_done.Wait();
    target_done.Wait();
  }

  // Each rank's partial sums, gathered and added in rank order.
  Tensor gathered = Tensor::Empty({tp.size(), rows}, DType::kF64, device);
  Tensor partial = gathered.Slice(tp.rank(), tp.rank() + 1);
  ops::CrossEntropySumExp(logits, begin, vocab_size, row_max, partial);
  {
    const ScopedSpan span(SpanKind::kCommTp, "all_gather tp (cross-entropy)");
    tp.AllGather(partial, gathered);  // in place: partial is this rank's row
  }
  Tensor sum_exp = gathered.Slice(0, 1).Reshape({rows});
  for (int r = 1; r < tp.size(); ++r) ops::Add(gathered.Slice(r, r + 1).Reshape({rows}), sum_exp);

  const double loss = ops::CrossEntropyLoss(targets, row_max, target_logit, sum_exp);
  if (dlogits.defined()) {
    ops::CrossEntropyGradient(logits, targets, begin, vocab_size, row_max, sum_exp, grad_scale,
                              dlogits);
  }
  return loss;
}

}  // namespace tetra
