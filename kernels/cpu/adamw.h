// The AdamW update exactly as torch.optim.AdamW's single-tensor path computes
// it (decoupled weight decay, bias correction, amsgrad off), one parameter
// tensor at a time; the optimizers in parallel/ and train/ call it per shard.
#ifndef TETRA_KERNELS_CPU_ADAMW_H_
#define TETRA_KERNELS_CPU_ADAMW_H_

#include <cstdint>

namespace tetra::cpu {

// Hyperparameters are double because torch's are Python floats: the scalar
// terms (bias corrections, step size) are formed in double and each is
// rounded to fp32 once where torch applies it to an fp32 tensor.
struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based count of updates including this one
};

// param, m (exp_avg), v (exp_avg_sq): (n), updated in place; grad: (n).
//   param *= 1 - lr * wd
//   m = lerp(m, grad, 1 - beta1);  v = beta2 * v + (1 - beta2) * grad^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
void AdamWUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWHyper& h);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_ADAMW_H_
