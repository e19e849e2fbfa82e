#include "moe/router_balance.h"

#include <vector>

#include "kernels/ops.h"

namespace tetra {

RouterBalance::RouterBalance(int moe_layers, const RouterSpec& spec, double coef)
    : moe_layers_(moe_layers), spec_(spec), coef_(coef) {}

void RouterBalance::Add(int slot, const Tensor& scores, const Tensor& expert) {
  Sums& s = slots_[slot];
  if (s.layers == 0 || s.layers == moe_layers_) {
    EnsureShape(&s.counts, {spec_.num_experts}, DType::kI32, scores.device());
    EnsureShape(&s.psum, {spec_.num_experts}, DType::kF32, scores.device());
    s.counts.SetZero();
    s.psum.SetZero();
    s.layers = 0;
    s.final = false;
  }
  ops::CountExpertLoads(spec_, expert, s.counts);
  ops::BiasGradient(scores, s.psum);  // the column sums of the scores
  ++s.layers;
}

double RouterBalance::AddScoreGradient(int slot, int64_t batch, float grad_scale,
                                       const Tensor& dscores) {
  Sums& s = slots_.at(slot);
  TETRA_CHECK(s.layers == moe_layers_)
      << "the router balance loss's backward of micro-batch slot " << slot << " before all "
      << moe_layers_ << " MoE layers' forwards";
  double share = 0;
  if (!s.final) {
    const int experts = spec_.num_experts;
    const Tensor counts = Tensor::Empty({experts}, DType::kI32), psum = Tensor::Empty({experts});
    counts.CopyFrom(s.counts);
    psum.CopyFrom(s.psum);
    // Every row of the micro-batch's scores, L layers of N tokens.
    const double pairs = double{1.0} * moe_layers_ * dscores.dim(0);
    const Tensor row = Tensor::Empty({experts});
    double aux = 0;
    for (int e = 0; e < experts; ++e) {
      aux += experts * (counts.data<int32_t>()[e] / pairs) * (psum.f32()[e] / pairs);
      // coef / M x E count_e / (L N)^2, with 1 / M = grad_scale x N.
      row.f32()[e] = static_cast<float>(coef_ * grad_scale * dscores.dim(0) * experts *
                                        counts.data<int32_t>()[e] / (pairs * pairs));
    }
    EnsureShape(&s.gradient, {experts}, DType::kF32, dscores.device());
    s.gradient.CopyFrom(row);
    s.final = true;
    share = coef_ * aux * batch;
  }
  ops::AddBias(s.gradient, dscores);
  return share;
}

}  // namespace tetra
