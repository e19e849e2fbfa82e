// The DeepSeek-V3 router as an MoE layer runs it: its settings from the
// model config, and one micro-batch's routing (scores, chosen experts,
// combine weights), kept for the backward. The arithmetic is the op API's
// (kernels/ops.h: RouterScores, RouterTopK and their backward, the balance
// loss, the loads and the bias update).
#ifndef TETRA_MOE_ROUTER_H_
#define TETRA_MOE_ROUTER_H_

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_types.h"
#include "proto/config.pb.h"

namespace tetra {

RouterSpec RouterSpecFromConfig(const MoeConfig& moe);

// One micro-batch's routing.
struct Routing {
  Tensor scores;   // (N, E) unbiased scores s, fp32
  Tensor expert;   // (N, k) int32 chosen experts, best biased score first
  Tensor weights;  // (N, k) fp32 combine weights
  int64_t tokens() const { return scores.dim(0); }
};

// logits (N, E), bias (E) -> *routing (buffers reused), on their device.
void Route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Routing* routing);

// max / mean of loads (1 when every load is 0): the imbalance the metrics report.
double LoadImbalance(const std::vector<int64_t>& loads);

}  // namespace tetra

#endif  // TETRA_MOE_ROUTER_H_
