#include "optimizer/lr_schedule.h"

#include <cmath>

namespace tetra {

double LearningRate(const OptimizerConfig& o, int step, int total_steps) {
  const int warmup = o.warmup_steps();
  if (warmup > 0 && step <= warmup) return o.lr() * step / warmup;
  const int decay_steps = total_steps - warmup - 1;  // steps after the first post-warmup one
  if (decay_steps <= 0) return o.lr();
  const double progress = static_cast<double>(step - warmup - 1) / decay_steps;
  return o.min_lr() + (o.lr() - o.min_lr()) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tetra
