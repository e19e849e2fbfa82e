// The learning rate at optimizer step s (1-based), as docs/architecture.md defines it:
// linear warmup lr * s / w for s <= w, then cosine from lr (step w+1) down to
// min_lr (the last step); constant when min_lr == lr.
#ifndef TETRA_OPTIMIZER_LR_SCHEDULE_H_
#define TETRA_OPTIMIZER_LR_SCHEDULE_H_

#include "proto/config.pb.h"

namespace tetra {

double LearningRate(const OptimizerConfig& optimizer, int step, int total_steps);

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_LR_SCHEDULE_H_
