// The SwiGLU MLP of a Llama block: down_proj(silu(gate_proj(x)) * up_proj(x)).
// Tensor-parallel: gate/up column-parallel and down row-parallel, so each
// rank computes intermediate / tp features; the input enters and the output
// leaves the tensor-parallel region through TensorParallelRegion.
#ifndef TETRA_MODEL_MLP_LAYER_H_
#define TETRA_MODEL_MLP_LAYER_H_

#include <string>

#include "model/model_parallelism.h"
#include "model/parameters.h"
#include "parallel/tensor_parallel.h"
#include "proto/config.pb.h"

namespace tetra {

class MlpLayer {
 public:
  // `prefix` is e.g. "model.layers.3.mlp".
  MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config,
           const LayerParallelism& parallelism = SingleRankParallelism());
  // x (rows, C): this rank's token rows (all N, or under SP its N/tp) -> y,
  // the same rows. Keeps the input, gate, up and the activation.
  Tensor Forward(const Tensor& x);
  // dy (rows of y) -> dx (rows of x), written; accumulates weight gradients.
  Tensor Backward(const Tensor& dy);

 private:
  int64_t intermediate_;  // this rank's features
  Parameter &gate_proj_, &up_proj_, &down_proj_;
  TensorParallelRegion region_;
  Tensor x_, gate_, up_, act_, y_;   // forward: x_ and y_ (N, C), the rest (N, I/tp)
  Tensor dact_, dgate_, dup_, dx_;   // backward
};

}  // namespace tetra

#endif  // TETRA_MODEL_MLP_LAYER_H_
