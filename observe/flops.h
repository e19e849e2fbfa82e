// Model FLOPs per trained token, counted as docs/architecture.md's metrics contract says:
// 6 x N_active + 6 x L x T x (heads x head_dim), where N_active counts every
// parameter a token passes through except the input embedding, LM head
// included (the second term is causal attention's scores and values, forward
// and backward). An MoE layer counts its router, shared experts and the
// num_experts_per_tok routed experts each token passes through. Under
// multi-head latent attention head_dim is the mean of the query/key head dim
// (qk_nope + qk_rope, the scores') and v_head_dim (the values'). Multi-token
// prediction's D depths add, per token, what each runs: eh_proj, its three
// norms, one more layer (MoE in an MoE model) with its attention, and
// another pass through the LM head (as Megatron-LM counts MTP layers);
// ActiveParameters stays the main model's, as DeepSeek-V3's 37B does.
//
// The parameter counts behind it are the one count of a model's pieces: the
// layout planner (plan/) sizes memory and time from the same numbers.
#ifndef TETRA_OBSERVE_FLOPS_H_
#define TETRA_OBSERVE_FLOPS_H_

#include <cstdint>

#include "proto/config.pb.h"

namespace tetra {

// Parameters of each piece of a model (doubles: exact below 2^53, and the
// planner divides them).
struct ParameterCounts {
  int layers = 0, moe_layers = 0;  // the first layers - moe_layers are dense
  double attention =
      0;             // per layer: q, k, v, o projections (MLA: its projections and latent norms)
  double norms = 0;  // per layer: the two RMSNorm weights
  double dense_mlp = 0;       // per dense layer: gate, up, down
  double router = 0;          // per MoE layer: the gate over the routed experts
  double routed_experts = 0;  // per MoE layer: every routed expert
  double shared_experts = 0;  // per MoE layer
  double active_moe_mlp = 0;  // per token of an MoE layer: router, shared and k routed experts
  double embedding = 0;       // vocab x hidden: the input table, and the LM head's
  double final_norm = 0;
  int mtp_depths = 0;    // multi-token prediction depths
  bool mtp_moe = false;  // whether their layers are MoE (any routed experts: their index is past
                         // the dense ones)
  double mtp_join = 0;   // per depth: eh_proj (2C -> C) and the enorm, hnorm and shared_head norms
};

ParameterCounts CountParameters(const ModelConfig& model);
int64_t ActiveParameters(const ModelConfig& model);
double TrainingFlopsPerToken(const ModelConfig& model, int64_t seq_length);

}  // namespace tetra

#endif  // TETRA_OBSERVE_FLOPS_H_
