// AdamW over flat parameter buffers, exactly torch.optim.AdamW per element
// (ops::AdamW), with gradient clipping by the global L2 norm, data-parallel
// aware. ZeRO-0: every data-parallel rank holds moments for, and updates, the
// whole buffer (gradients all-reduced). ZeRO-1 (the reducer reduce-scatters):
// each rank holds the fp32 moments of, and updates, only its blocks, 1 / dp
// of the buffer, then the updated values are all-gathered per bucket, each
// bucket's gather launched as soon as its block is updated so it overlaps
// the update of the next. Both give the same values bit for bit.
//
// One step, every rank of the dp and norm groups calling, after
// GradientReducer::Finish():
//   const double norm = optimizer.GradNorm();   // before clipping, for metrics
//   optimizer.Clip(norm);
//   optimizer.Step(lr, step);
#ifndef TETRA_OPTIMIZER_DISTRIBUTED_OPTIMIZER_H_
#define TETRA_OPTIMIZER_DISTRIBUTED_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/flat_segment.h"
#include "parallel/gradient_reducer.h"
#include "proto/config.pb.h"

namespace tetra {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // on segments with weight_decay only
  double clip_grad = 1.0;     // max global gradient norm; 0 disables clipping

  static AdamWSettings FromConfig(const OptimizerConfig& config);
};

class DistributedOptimizer {
 public:
  // `flat_values` (total) fp32, the same size and offsets as the reducer's
  // gradients; `flat_compute` their bf16 compute copy, which Step keeps
  // equal to them rounded (undefined in fp32); `segments` the parameters
  // inside them (disjoint, any order).
  // `norm_group`: the ranks that hold different slices of one model replica
  // (tensor x pipeline: the mesh's model group; a group of one rank when
  // there is none). Sums of squares cross it, and under ZeRO-1 the dp group
  // too, as host doubles: both must be host-memory (MPI) communicators.
  // The tensors, `reducer` and `norm_group` must outlive this.
  DistributedOptimizer(Tensor flat_values, Tensor flat_compute, std::vector<FlatSegment> segments,
                       const AdamWSettings& settings, const GradientReducer& reducer,
                       Communicator& norm_group);
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // The global L2 norm of the summed gradients: sqrt of the sum over every
  // segment of norm_weight x its sum of squares, over all ranks of the norm
  // group. Collective; every rank gets the same bits, summed in rank order.
  double GradNorm();
  // This rank's part of the squared norm before the sum over the norm group
  // (under ZeRO-1 already summed over dp): for combining several optimizers'
  // norms. Collective over dp under ZeRO-1.
  double LocalGradSquaredSum();
  // Scales this rank's gradients (its blocks under ZeRO-1) by
  // clip_grad / (norm + 1e-6) when that is below 1, as torch's clip_grad_norm_.
  void Clip(double norm);
  // One AdamW update with learning rate `lr`; `step` counts from 1 (bias
  // correction), one multi-tensor pass per owned range that also writes the
  // compute copy. Under ZeRO-1, collective over dp: all ranks end with all
  // values, the others' blocks cast into the compute copy as they arrive.
  void Step(double lr, int step);

  // Bytes this rank holds: the fp32 moments m and v (of segment elements it
  // updates), the flat values, the flat gradients.
  int64_t optimizer_bytes() const { return static_cast<int64_t>(m_.nbytes() + v_.nbytes()); }
  int64_t param_bytes() const { return static_cast<int64_t>(values_.nbytes()); }
  int64_t grad_bytes() const { return static_cast<int64_t>(grads_.nbytes()); }

  // This rank's AdamW moments, for checkpoints: for each part of a segment it
  // updates (ascending, disjoint), the flat range and views of its fp32 m and v.
  struct MomentView {
    FlatRange range;
    Tensor exp_avg, exp_avg_sq;  // (range.size()) fp32
  };
  std::vector<MomentView> moments() const;

 private:
  // The part of one segment inside one owned range, and where its moments live.
  struct Piece {
    FlatRange range;
    int64_t moment_offset;
    bool weight_decay;
    double norm_weight;
  };

  bool zero1() const { return reducer_.reduce_scatter() && reducer_.dp().size() > 1; }

  Tensor values_, compute_, grads_;
  AdamWSettings settings_;
  const GradientReducer& reducer_;
  Communicator& norm_group_;
  std::vector<Piece> pieces_;            // ascending
  std::vector<size_t> pieces_of_range_;  // owned range k has pieces [at k, at k + 1)
  Tensor m_, v_;                         // (sum of piece sizes) fp32 moments
};

}  // namespace tetra

#endif  // TETRA_OPTIMIZER_DISTRIBUTED_OPTIMIZER_H_
