// RMSNorm with a learned scale (LlamaRMSNorm), statistics in fp32. The weight
// is replicated on every tensor-parallel rank; under sequence parallelism each
// rank normalises only its own token rows, so the weight gradient is summed
// over the TP group (as Megatron-LM does for sequence-parallel norms).
#ifndef TETRA_MODEL_RMSNORM_LAYER_H_
#define TETRA_MODEL_RMSNORM_LAYER_H_

#include <string>

#include "model/model_parallelism.h"
#include "model/parameters.h"

namespace tetra {

class RmsNormLayer {
 public:
  RmsNormLayer(ParameterStore& store, const std::string& name, int64_t dim, float eps,
               const LayerParallelism& parallelism = SingleRankParallelism());
  // x (N, C) -> y (N, C), N this rank's rows. Keeps x and the row statistics.
  const Tensor& Forward(const Tensor& x);
  // dy (N, C) -> dx (N, C), written; accumulates the weight gradient.
  const Tensor& Backward(const Tensor& dy);

  const Parameter& weight() const { return weight_; }

 private:
  Parameter& weight_;
  float eps_;
  Communicator* grad_group_;  // sums the weight gradient: TP under SP, else none
  Tensor x_, y_, rstd_, dx_, dweight_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_RMSNORM_LAYER_H_
