// Model FLOPs per trained token, counted as DESIGN.md's metrics contract says:
// 6 x N_active + 6 x L x T x (heads x head_dim), where N_active counts every
// parameter a token passes through except the input embedding, LM head
// included (the second term is causal attention's scores and values, forward
// and backward). An MoE layer counts its router, shared experts and the
// num_experts_per_tok routed experts each token passes through.
#ifndef TETRA_OBSERVE_FLOPS_H_
#define TETRA_OBSERVE_FLOPS_H_

#include <cstdint>

#include "proto/config.pb.h"

namespace tetra {

int64_t ActiveParameters(const ModelConfig& model);
double TrainingFlopsPerToken(const ModelConfig& model, int64_t seq_length);

}  // namespace tetra

#endif  // TETRA_OBSERVE_FLOPS_H_
