// RMSNorm with a learned scale (LlamaRMSNorm), statistics in fp32.
#ifndef TETRA_MODEL_RMSNORM_LAYER_H_
#define TETRA_MODEL_RMSNORM_LAYER_H_

#include <string>

#include "model/parameters.h"

namespace tetra {

class RmsNormLayer {
 public:
  RmsNormLayer(ParameterStore& store, const std::string& name, int64_t dim, float eps);
  // x (N, C) -> y (N, C). Keeps x and the row statistics for Backward.
  const Tensor& Forward(const Tensor& x);
  // dy (N, C) -> dx (N, C), written; accumulates the weight gradient.
  const Tensor& Backward(const Tensor& dy);

 private:
  Parameter& weight_;
  float eps_;
  Tensor x_, y_, rstd_, dx_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_RMSNORM_LAYER_H_
