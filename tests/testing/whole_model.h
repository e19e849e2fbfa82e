// The whole model on one pipeline stage, micro-batch by micro-batch, as the
// one-stage schedule of pipeline/executor.h runs it, for the tests of the
// layers below pipeline/ (which cannot link the executor): a forward through
// chunk 0 in an activation slot, its backward, and the partial gradient sums
// the optimizer's finalisation takes after the step's backwards.
#ifndef TETRA_TESTS_TESTING_WHOLE_MODEL_H_
#define TETRA_TESTS_TESTING_WHOLE_MODEL_H_

#include <cstdint>

#include "comm/communicator.h"
#include "core/logging.h"
#include "model/language_model.h"

namespace tetra::testing {

inline void CheckWholeModel(const LanguageModel& model) {
  const PipelineStage& stage = model.chunk(0);
  TETRA_CHECK(model.num_chunks() == 1 && stage.has_embedding && stage.has_head &&
              stage.num_layers == model.config().num_hidden_layers())
      << "the test helpers run a whole model, not a pipeline stage";
}

// The sum of the B*T token cross-entropies of inputs, targets (B, T); the
// slot then awaits Backward, which accumulates the gradient of grad_scale x it.
inline double Forward(LanguageModel& model, int slot, const int32_t* inputs, const int32_t* targets,
                      int64_t batch, int64_t seq, float grad_scale) {
  CheckWholeModel(model);
  double loss = 0;
  model.ForwardStage(slot, 0, inputs, Tensor(), targets, batch, seq, grad_scale, &loss);
  return loss;
}

inline void Backward(LanguageModel& model, int slot,
                     const LanguageModel::GradientReadyCallback& on_ready = nullptr) {
  model.BackwardStage(slot, 0, Tensor(), on_ready);
}

inline double ForwardBackward(LanguageModel& model, const int32_t* inputs, const int32_t* targets,
                              int64_t batch, int64_t seq, float grad_scale,
                              const LanguageModel::GradientReadyCallback& on_ready = nullptr) {
  const double loss = Forward(model, 0, inputs, targets, batch, seq, grad_scale);
  Backward(model, 0, on_ready);
  return loss;
}

// The same sum without gradients.
inline double ForwardLoss(LanguageModel& model, const int32_t* inputs, const int32_t* targets,
                          int64_t batch, int64_t seq) {
  CheckWholeModel(model);
  double loss = 0;
  model.EvaluateStage(0, 0, inputs, Tensor(), targets, batch, seq, &loss);
  return loss;
}

// Sums every gradient that ranks hold parts of over its group
// (Parameter::grad_partial_over), as the optimizer does after a step's
// backwards (optimizer/partial_gradient_sums.h).
inline void SumPartialGradients(LanguageModel& model) {
  for (Parameter& p : model.parameters().all()) {
    if (p.grad_partial_over == nullptr) continue;
    p.grad_partial_over->AllReduce(p.grad, p.grad, ReduceOp::kSum);
  }
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_WHOLE_MODEL_H_
