// transformers' load-balancing loss of Mixtral and Qwen3Moe
// (load_balancing_loss_func, added with output_router_logits): over every
// MoE layer's router of one micro-batch,
//   aux = E x sum_e f_e P_e,  f_e = count_e / (L N),  P_e = psum_e / (L N)
// with L the model's MoE layers, N the micro-batch's tokens, count_e the
// (token, choice) pairs that chose expert e and psum_e the sum of its softmax
// scores, over all L layers; the objective gets
// model.moe.router_aux_loss_coef x aux per micro-batch, weighted as
// transformers' gradient accumulation weights it (1 / the micro-batches of
// the global batch). Unlike DeepSeek-V3's sequence-wise loss it couples the
// layers: each layer's forward adds its counts and score sums, and the first
// backward of the micro-batch (the last layer's) takes the totals (one
// host wait per micro-batch); d aux / d score[t, e] = E count_e / (L N)^2
// for every token. One RouterBalance serves all MoE layers of a model that
// holds all of them and every token of its sequences (one pipeline stage, no
// context parallelism, which config validation requires).
#ifndef TETRA_MOE_ROUTER_BALANCE_H_
#define TETRA_MOE_ROUTER_BALANCE_H_

#include <cstdint>
#include <map>

#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra {

class RouterBalance {
 public:
  RouterBalance(int moe_layers, const RouterSpec& spec, double coef);

  // One layer's forward of micro-batch `slot`: its (N, E) fp32 scores and
  // (N, k) int32 choices. The first layer's after a completed micro-batch
  // starts the slot's sums anew.
  void Add(int slot, const Tensor& scores, const Tensor& expert);

  // One layer's backward of micro-batch `slot` of `batch` sequences:
  // dscores (N, E) += the loss's score gradient, grad_scale the
  // cross-entropy sum's weight. Returns coef x aux x batch (the share of the
  // step's aux_loss metric, which divides by the global batch) on the first
  // backward of the micro-batch, else 0.
  double AddScoreGradient(int slot, int64_t batch, float grad_scale, const Tensor& dscores);

 private:
  struct Sums {
    Tensor counts;    // (E) int32
    Tensor psum;      // (E) fp32
    Tensor gradient;  // (E) fp32: the score gradient's row, once the totals are in
    int layers = 0;   // layers added since the micro-batch began
    bool final = false;
  };

  int moe_layers_;
  RouterSpec spec_;
  double coef_;
  std::map<int, Sums> slots_;
};

}  // namespace tetra

#endif  // TETRA_MOE_ROUTER_BALANCE_H_
