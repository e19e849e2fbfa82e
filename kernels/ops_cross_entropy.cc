// The cross-entropy ops of the op API (kernels/ops.h): fused, and in the
// vocabulary-parallel steps.
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits, int64_t vocab_size) {
  CheckCrossEntropy(logits, targets, dlogits, vocab_size);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda<double>(
        [&](auto) { return cuda::CrossEntropy(logits, targets, grad_scale, dlogits, vocab_size); });
  ExpectHost(logits);
  HostF32 f32;
  return cpu::CrossEntropyForwardBackward(f32.In(logits), targets.data<int32_t>(), Rows(logits),
                                          logits.dim(-1), vocab_size, grad_scale, f32.Out(dlogits),
                                          nullptr);
}

void CrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& target_logit) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropyRowStats(logits, targets, vocab_begin, row_max, target_logit);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropyRowStats(logits, targets, vocab_begin, vocab_size, row_max,
                                        target_logit);
    });
  ExpectHost(logits, targets, row_max, target_logit);
  HostF32 f32;
  cpu::CrossEntropyRowStats(f32.In(logits), targets.data<int32_t>(), rows, logits.dim(-1),
                            vocab_begin, vocab_size, f32.Out(row_max), f32.Out(target_logit));
}

void CrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, int64_t vocab_size,
                        const Tensor& row_max, const Tensor& sum_exp) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropySumExp(logits, vocab_begin, row_max, sum_exp);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropySumExp(logits, vocab_begin, vocab_size, row_max, sum_exp);
    });
  ExpectHost(logits, row_max, sum_exp);
  HostF32 f32;
  cpu::CrossEntropySumExp(f32.In(logits), f32.In(row_max), rows, logits.dim(-1), vocab_begin,
                          vocab_size, sum_exp.data<double>());
}

double CrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                        const Tensor& sum_exp) {
  CheckCrossEntropyLoss(targets, row_max, target_logit, sum_exp);
  const OpTimer op_timer(__func__, row_max.device());
  if (OnDevice(row_max))
    return OnCuda<double>(
        [&](auto) { return cuda::CrossEntropyLoss(targets, row_max, target_logit, sum_exp); });
  ExpectHost(targets, row_max, target_logit, sum_exp);
  HostF32 f32;
  return cpu::CrossEntropyLoss(targets.data<int32_t>(), f32.In(row_max), f32.In(target_logit),
                               sum_exp.data<double>(), row_max.numel());
}

void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& sum_exp,
                          float grad_scale, const Tensor& dlogits) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropyGradient(logits, targets, vocab_begin, row_max, sum_exp, dlogits);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropyGradient(logits, targets, vocab_begin, vocab_size, row_max, sum_exp,
                                        grad_scale, dlogits);
    });
  ExpectHost(logits, targets, row_max, sum_exp, dlogits);
  HostF32 f32;
  cpu::CrossEntropyGradient(f32.In(logits), targets.data<int32_t>(), f32.In(row_max),
                            sum_exp.data<double>(), rows, logits.dim(-1), vocab_begin, vocab_size,
                            grad_scale, f32.Out(dlogits));
}

}  // namespace tetra::ops
