// The AdamW update exactly as torch.optim.AdamW's single-tensor path computes
// it (decoupled weight decay, bias correction, amsgrad off), one parameter
// tensor at a time; the optimizers in parallel/ and train/ call it per shard.
#ifndef TETRA_KERNELS_CPU_ADAMW_H_
#define TETRA_KERNELS_CPU_ADAMW_H_

#include <cstdint>

#include "kernels/op_types.h"

namespace tetra::cpu {

// param, m (exp_avg), v (exp_avg_sq): (n), updated in place; grad: (n).
//   param *= 1 - lr * wd
//   m = lerp(m, grad, 1 - beta1);  v = beta2 * v + (1 - beta2) * grad^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
void AdamWUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWHyper& h);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ADAMW_H_
