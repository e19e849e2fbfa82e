#include "train/adamw_optimizer.h"

#include <cmath>

#include "kernels/ops.h"

namespace tetra {

AdamWOptimizer::AdamWOptimizer(ParameterStore& store, const OptimizerConfig& config)
    : store_(store), config_(config) {
  for (const Parameter& p : store_.all()) {
    m_.push_back(Tensor::Zeros(p.value.shape()));
    v_.push_back(Tensor::Zeros(p.value.shape()));
  }
}

double AdamWOptimizer::GradNorm() const {
  double sum = 0;
  for (const Parameter& p : store_.all()) sum += ops::SumOfSquares(p.grad);
  return std::sqrt(sum);
}

void AdamWOptimizer::ClipGradients(double grad_norm) const {
  if (config_.clip_grad() <= 0) return;
  const double coefficient = config_.clip_grad() / (grad_norm + 1e-6);
  if (coefficient >= 1.0) return;
  for (const Parameter& p : store_.all()) ops::Scale(p.grad, static_cast<float>(coefficient));
}

void AdamWOptimizer::Step(double lr, int step) {
  size_t i = 0;
  for (const Parameter& p : store_.all()) {
    AdamWHyper hyper{lr, config_.beta1(), config_.beta2(), config_.eps(),
                     p.weight_decay ? config_.weight_decay() : 0.0, step};
    ops::AdamW(p.value, p.grad, m_[i], v_[i], hyper);
    ++i;
  }
}

}  // namespace tetra
