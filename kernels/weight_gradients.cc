#include "kernels/weight_gradients.h"

#include <algorithm>
#include <utility>

#include "core/logging.h"
#include "kernels/ops.h"

namespace tetra {

void WeightGradients::DeferInto(Deferred* deferred) {
  TETRA_CHECK(deferred != nullptr) << "deferring weight gradients into nothing";
  deferred_ = deferred;
}

void WeightGradients::Add(Work work) {
  if (deferred_ == nullptr) {
    work();
  } else {
    deferred_->work.push_back(std::move(work));
  }
}

Tensor WeightGradients::Keep(const Tensor& t) {
  if (deferred_ == nullptr) return t;
  const auto fits = std::find_if(free_.begin(), free_.end(), [&](const Tensor& b) {
    return b.numel() == t.numel() && b.dtype() == t.dtype() && b.device() == t.device();
  });
  Tensor copy;
  if (fits == free_.end()) {
    copy = Tensor::Empty(t.shape(), t.dtype(), t.device());
  } else {
    copy = fits->Reshape(t.shape());
    *fits = std::move(free_.back());
    free_.pop_back();
  }
  copy.CopyFrom(t);
  deferred_->kept.push_back(copy);
  return copy;
}

void WeightGradients::Run(Deferred& deferred) {
  TETRA_CHECK(&deferred != deferred_) << "running weight gradients that are still being deferred";
  for (Work& w : deferred.work) w();
  deferred.work.clear();  // the work's handles on the copies go
  for (Tensor& t : deferred.kept) free_.push_back(std::move(t));
  deferred.kept.clear();
}

void WeightGradients::LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                     const Tensor& dx, const Tensor& dw, bool accumulate_dx,
                                     int64_t real_out) {
  if (!deferring()) {
    ops::LinearBackward(dy, x, w, dx, dw, accumulate_dx, real_out);
    return;
  }
  if (dx.defined()) ops::LinearBackward(dy, x, w, dx, Tensor(), accumulate_dx, real_out);
  Add([=] { ops::LinearBackward(dy, x, w, Tensor(), dw, /*accumulate_dx=*/false, real_out); });
}

void WeightGradients::RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                      const Tensor& dx_add) {
  if (!deferring()) {
    ops::RmsNormBackward(dy, x, w, rstd, dx, dw, dx_add);
    return;
  }
  const Tensor kept_dy = Keep(dy);
  Add([=] { ops::RmsNormBackward(kept_dy, x, w, rstd, Tensor(), dw); });
  ops::RmsNormBackward(dy, x, w, rstd, dx, Tensor(), dx_add);
}

}  // namespace tetra
