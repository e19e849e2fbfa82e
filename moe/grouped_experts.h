// The routed experts of one rank as a grouped computation: each expert is a
// SwiGLU MLP, down(silu(gate x) * up x), applied to its own contiguous run
// of rows of one (R, C) buffer (the dispatcher's grouped order), as a
// grouped GEMM would on a GPU.
#ifndef TETRA_MOE_GROUPED_EXPERTS_H_
#define TETRA_MOE_GROUPED_EXPERTS_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/weight_gradients.h"

namespace tetra {

// One expert's weights (Hugging Face layout) and their gradients.
struct ExpertWeights {
  Tensor gate_proj, up_proj;  // (I, C)
  Tensor down_proj;           // (C, I)
  Tensor gate_grad, up_grad, down_grad;
};

// What the backward needs.
struct GroupedActivations {
  Tensor x;                   // (R, C) the input rows (shared with the caller's)
  Tensor gate, up;            // (R, I)
  Tensor act;                 // (R, I); undefined when the backward recomputes it
  std::vector<int64_t> rows;  // rows of each expert, in order
};

// x (R, C), rows[e] rows for experts[e] in turn -> y (R, C), written; saves
// what the backward needs in *a: with `keep_activation` false (selective
// recompute) not the SwiGLU activations, which the backward computes again
// from gate and up. x is kept, not copied: leave it unchanged until the
// backward.
void GroupedSwigluForward(const std::vector<ExpertWeights>& experts,
                          const std::vector<int64_t>& rows, const Tensor& x, GroupedActivations* a,
                          Tensor* y, bool keep_activation = true);

// dy (R, C) -> *dx (R, C), written; the experts' weight gradients
// accumulate through `weight_gradients` (now, or deferred to a split
// backward's W: kernels/weight_gradients.h).
void GroupedSwigluBackward(const std::vector<ExpertWeights>& experts, const GroupedActivations& a,
                           const Tensor& dy, Tensor* dx, Tensor* scratch_dact,
                           Tensor* scratch_dgate, Tensor* scratch_dup,
                           WeightGradients& weight_gradients);

}  // namespace tetra

#endif  // TETRA_MOE_GROUPED_EXPERTS_H_
