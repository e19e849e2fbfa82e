#include "parallel/vocab_parallel_cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/logging.h"
#include "core/profiler.h"
#include "kernels/cpu/partition.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/ops.h"

namespace tetra {

// The per-row loops run on the host, the same arithmetic as the single-rank
// kernel (kernels/cpu/cross_entropy.cc): the exps are fp32 VecExp of
// (logit - max), summed in double, and the gradient is exp x fp32(scale / sum).
double VocabParallelCrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                                 const Tensor& dlogits, Communicator& tp) {
  if (tp.size() == 1) return ops::CrossEntropy(logits, targets, grad_scale, dlogits);
  TETRA_CHECK(logits.device() == DeviceType::kCPU)
      << "vocab-parallel cross-entropy runs on the host";
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  const int64_t begin = tp.rank() * vocab, global_vocab = vocab * tp.size();
  TETRA_CHECK(targets.numel() == rows && (!dlogits.defined() || dlogits.numel() == logits.numel()))
      << "vocab-parallel cross-entropy: logits " << ShapeString(logits.shape()) << ", targets "
      << ShapeString(targets.shape());
  const float* x = logits.f32();
  const int32_t* target = targets.data<int32_t>();
  float* d = dlogits.defined() ? dlogits.f32() : nullptr;

  // The row max and this rank's share of the target logit (0 unless it owns it).
  std::vector<float> max(rows), target_logit(rows, 0.0f);
#pragma omp parallel for schedule(static) if (rows * vocab >= cpu::kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    TETRA_CHECK(target[r] >= 0 && target[r] < global_vocab)
        << "target " << target[r] << " of row " << r << " outside [0, " << global_vocab << ")";
    const float* row = x + r * vocab;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < vocab; ++j) m = row[j] > m ? row[j] : m;
    max[r] = m;
    const int64_t local = target[r] - begin;
    if (local >= 0 && local < vocab) target_logit[r] = row[local];
  }
  CommHandle max_done =
      tp.AllReduceAsync(max.data(), max.data(), rows, DType::kF32, ReduceOp::kMax);
  CommHandle target_done = tp.AllReduceAsync(target_logit.data(), target_logit.data(), rows,
                                             DType::kF32, ReduceOp::kSum);
  {
    const ScopedSpan span(SpanKind::kCommTp, "all_reduce tp (cross-entropy)");
    max_done.Wait();
    target_done.Wait();
  }

  // Partial sums of exp(x - max) over this slice; the exps go to dlogits.
  std::vector<double> partial(rows);
#pragma omp parallel for schedule(static) if (rows * vocab >= cpu::kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * vocab;
    const float m = max[r];
    float* e = d != nullptr ? d + r * vocab : nullptr;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const float ej = cpu::VecExp(row[j] - m);
      if (e != nullptr) e[j] = ej;
      sum += ej;
    }
    partial[r] = sum;
  }
  // Doubles travel as pairs of int32 words: moved bit for bit, never reduced.
  std::vector<double> gathered(rows * tp.size());
  static_assert(sizeof(double) == 2 * sizeof(int32_t));
  {
    const ScopedSpan span(SpanKind::kCommTp, "all_gather tp (cross-entropy)");
    tp.AllGather(partial.data(), gathered.data(), 2 * rows, DType::kI32);
  }

  double loss = 0;
  std::vector<double> sums(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < tp.size(); ++k) sums[r] += gathered[k * rows + r];
    loss += (static_cast<double>(max[r]) - target_logit[r]) + std::log(sums[r]);
  }
  if (d == nullptr) return loss;
#pragma omp parallel for schedule(static) if (rows * vocab >= cpu::kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    float* e = d + r * vocab;
    const float scale = static_cast<float>(grad_scale / sums[r]);
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) e[j] *= scale;
    const int64_t local = target[r] - begin;
    if (local >= 0 && local < vocab) e[local] -= grad_scale;
  }
  return loss;
}

}  // namespace tetra
