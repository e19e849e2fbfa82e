// The SwiGLU MLP of a Llama block: down_proj(silu(gate_proj(x)) * up_proj(x)).
#ifndef TETRA_MODEL_MLP_LAYER_H_
#define TETRA_MODEL_MLP_LAYER_H_

#include <string>

#include "model/parameters.h"
#include "proto/config.pb.h"

namespace tetra {

class MlpLayer {
 public:
  // `prefix` is e.g. "model.layers.3.mlp".
  MlpLayer(ParameterStore& store, const std::string& prefix, const ModelConfig& config);
  // x (N, C) -> y (N, C). Keeps x, gate, up and the activation.
  const Tensor& Forward(const Tensor& x);
  // dy (N, C) -> dx (N, C), written; accumulates weight gradients.
  const Tensor& Backward(const Tensor& dy);

 private:
  int64_t intermediate_;
  Parameter &gate_proj_, &up_proj_, &down_proj_;
  Tensor x_, gate_, up_, act_, y_;   // forward, (N, I) except x_ and y_
  Tensor dact_, dgate_, dup_, dx_;   // backward
};

}  // namespace tetra

#endif  // TETRA_MODEL_MLP_LAYER_H_
