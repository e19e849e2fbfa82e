#include "kernels/weight_gradients.h"

#include <utility>

#include "core/logging.h"
#include "kernels/ops.h"

namespace tetra {

void WeightGradients::DeferInto(std::vector<Work>* work) {
  TETRA_CHECK(work != nullptr) << "deferring weight gradients into nothing";
  deferred_ = work;
}

void WeightGradients::Add(Work work) {
  if (deferred_ == nullptr) {
    work();
  } else {
    deferred_->push_back(std::move(work));
  }
}

Tensor WeightGradients::Keep(const Tensor& t) const {
  if (deferred_ == nullptr) return t;
  Tensor copy = Tensor::Empty(t.shape(), t.dtype(), t.device());
  copy.CopyFrom(t);
  return copy;
}

void WeightGradients::LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                     const Tensor& dw, bool accumulate_dx, int64_t real_out) {
  if (!deferring()) {
    ops::LinearBackward(dy, x, w, dx, dw, accumulate_dx, real_out);
    return;
  }
  if (dx.defined()) ops::LinearBackward(dy, x, w, dx, Tensor(), accumulate_dx, real_out);
  Add([=] { ops::LinearBackward(dy, x, w, Tensor(), dw, /*accumulate_dx=*/false, real_out); });
}

void WeightGradients::RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                                      const Tensor& dx, const Tensor& dw, const Tensor& dx_add) {
  if (!deferring()) {
    ops::RmsNormBackward(dy, x, w, rstd, dx, dw, dx_add);
    return;
  }
  const Tensor kept_dy = Keep(dy);
  Add([=] { ops::RmsNormBackward(kept_dy, x, w, rstd, Tensor(), dw); });
  ops::RmsNormBackward(dy, x, w, rstd, dx, Tensor(), dx_add);
}

void RunWeightGradients(std::vector<WeightGradients::Work>& work) {
  for (WeightGradients::Work& w : work) w();
  work.clear();
}

}  // namespace tetra
