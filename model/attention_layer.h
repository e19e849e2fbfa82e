// Self-attention of a Llama block: q/k/v projections, rotary embeddings,
// causal grouped-query attention, output projection (no biases).
//
// Tensor-parallel (model_parallelism.h): q/k/v are column-parallel, so each
// rank computes its own query heads (heads / tp) and key-value heads (kv / tp,
// or one shared with kv_replicas when kv < tp), and o_proj is row-parallel;
// the input enters and the output leaves the tensor-parallel region through
// TensorParallelRegion (all-reduce, or under SP all-gather / reduce-scatter).
#ifndef TETRA_MODEL_ATTENTION_LAYER_H_
#define TETRA_MODEL_ATTENTION_LAYER_H_

#include <string>

#include "kernels/op_types.h"
#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "parallel/tensor_parallel.h"
#include "proto/config.pb.h"

namespace tetra {

class AttentionLayer {
 public:
  // `prefix` is e.g. "model.layers.3.self_attn".
  AttentionLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
                 const LayerParallelism& parallelism = SingleRankParallelism());
  // x: this rank's rows of the (B*T, C) activation, sequences of `seq` tokens
  // back to back (all B*T rows, or under SP its B*T/tp) -> y, the same rows.
  // Keeps q, k, v (after RoPE), the output and lse.
  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq);
  // dy (rows of y) -> dx (rows of x), written; accumulates weight gradients.
  Tensor Backward(const Tensor& dy);

 private:
  int64_t q_heads_, kv_heads_, head_dim_;  // this rank's heads
  double rope_theta_;
  Parameter &q_proj_, &k_proj_, &v_proj_, &o_proj_;
  TensorParallelRegion region_;
  Communicator* kv_replicas_;
  RopeTable rope_;
  Tensor x_, q_, k_, v_, attn_, lse_, y_;             // forward; x_ (B*T, C)
  Tensor dattn_, dq_, dk_, dv_, dx_, dk_w_, dv_w_;    // backward
};

}  // namespace tetra

#endif  // TETRA_MODEL_ATTENTION_LAYER_H_
