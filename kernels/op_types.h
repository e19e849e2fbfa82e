// Parameter types of the op API (kernels/ops.h) that are more than a Tensor:
// attention shapes, AdamW hyperparameters, the router's settings (and the
// RoPE table, kernels/rotary_tables.h). They belong to
// no backend, so the CPU kernels and a CUDA backend take the same types.
#ifndef TETRA_KERNELS_OP_TYPES_H_
#define TETRA_KERNELS_OP_TYPES_H_

#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/rotary_tables.h"

namespace tetra {

// A cross-entropy target below 0 leaves its row out: it adds no loss and its
// logits' gradient is 0 (Megatron's loss mask, PyTorch's ignore_index), as
// multi-token prediction's rows past the end of their sequence are.
inline constexpr int32_t kIgnoredTarget = -1;

// q: (B, T, Hq, D); k: (B, Tk, Hkv, D); v: (B, Tk, Hkv, Dv); out, dout:
// (B, T, Hq, Dv); lse: (B, Hq, T) of the scaled scores. Scores are scaled by
// softmax_scale, by default 1 / sqrt(D) whatever Dv is. Dv differs from D in
// DeepSeek-V3's MLA (D = 192: 128 dims without position plus 64 rotary ones;
// Dv = 128), whose scale YaRN multiplies by mscale^2. A model's attention is
// causal over its own sequence (Tk = T); context parallelism's ring attention
// also runs blocks of queries against another rank's keys, all of them
// visible (causal false, Tk of its own), and merges the blocks by their lse
// (ops::AttentionMerge).
struct AttentionShape {
  int64_t batch;             // B
  int64_t seq;               // T, queries per sequence
  int64_t q_heads;           // Hq, a multiple of kv_heads
  int64_t kv_heads;          // Hkv
  int64_t head_dim;          // D, of queries and keys
  int64_t v_head_dim = 0;    // Dv, of values and outputs; 0: the same as D
  double softmax_scale = 0;  // 0: 1 / sqrt(D)
  int64_t kv_seq = 0;        // keys (and values) per sequence; 0: the same as seq
  bool causal = true;        // query t sees keys 0..t (needs kv_seq == seq); false: every key

  int64_t value_dim() const { return v_head_dim == 0 ? head_dim : v_head_dim; }
  int64_t keys() const { return kv_seq == 0 ? seq : kv_seq; }
  // The scale the kernels multiply scores by, rounded to fp32 once.
  float scale() const {
    return static_cast<float>(softmax_scale != 0 ? softmax_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(head_dim)));
  }
};

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

// One parameter tensor of a multi-tensor AdamW update: fp32 param, grad, m
// (exp_avg) and v (exp_avg_sq) of one shape; param_bf16, when defined,
// receives the updated weights rounded to bf16 (the compute copy of mixed
// precision). `decay`: whether AdamWHyper::weight_decay applies (matrices),
// or none (norm weights, biases).
struct AdamWTensors {
  Tensor param;
  Tensor grad;
  Tensor m;
  Tensor v;
  Tensor param_bf16;
  bool decay = true;
};

// The DeepSeek-V3 router's settings (model.moe's fields): E routed experts in
// n_group equal groups, k chosen per token among the topk_group best groups.
struct RouterSpec {
  int num_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  bool softmax = false;  // scoring_func "softmax"; else "sigmoid"
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// Initial weights: element i of a tensor gets std x the standard normal
// Philox4x32-10 draws for (seed, stream, g) (CounterRng::Normal, Box-Muller
// in double, core/philox.h), g its index in the global tensor the tensor is
// a slice of. The slice: steps [offset, offset + local_extent) of one dim of
// global_extent steps, each step `inner` contiguous elements (unsliced:
// local_extent = global_extent, offset 0). So every rank draws exactly its
// slice of the values one process would draw for the whole tensor.
struct NormalInit {
  uint64_t seed = 0;
  uint64_t stream = 0;
  double std = 1.0;
  int64_t inner = 1;
  int64_t local_extent = 1;
  int64_t global_extent = 1;
  int64_t offset = 0;
};

}  // namespace tetra

#endif  // TETRA_KERNELS_OP_TYPES_H_
