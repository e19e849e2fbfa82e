#include "moe/grouped_experts.h"

#include "core/logging.h"
#include "kernels/ops.h"

namespace tetra {

void GroupedSwigluForward(const std::vector<ExpertWeights>& experts,
                          const std::vector<int64_t>& rows, const Tensor& x, GroupedActivations* a,
                          Tensor* y, bool keep_activation) {
  TETRA_CHECK(rows.size() == experts.size())
      << rows.size() << " row counts for " << experts.size() << " experts";
  const int64_t total = x.dim(0), width = experts.empty() ? 0 : experts[0].gate_proj.dim(0);
  a->x = x;
  EnsureShape(&a->gate, {total, width});
  EnsureShape(&a->up, {total, width});
  EnsureShape(&a->act, {total, width});
  EnsureShape(y, x.shape());
  a->rows = rows;
  int64_t begin = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t end = begin + rows[e];
    if (end > begin) {
      const ExpertWeights& w = experts[e];
      const Tensor gate = a->gate.Slice(begin, end), up = a->up.Slice(begin, end),
                   act = a->act.Slice(begin, end);
      ops::Linear(a->x.Slice(begin, end), w.gate_proj, gate);
      ops::Linear(a->x.Slice(begin, end), w.up_proj, up);
      ops::Swiglu(gate, up, act);
      ops::Linear(act, w.down_proj, y->Slice(begin, end));
    }
    begin = end;
  }
  TETRA_CHECK(begin == total) << "expert row counts sum to " << begin << ", not " << total;
  if (!keep_activation) a->act = Tensor();
}

void GroupedSwigluBackward(const std::vector<ExpertWeights>& experts, const GroupedActivations& a,
                           const Tensor& dy, Tensor* dx, Tensor* dact, Tensor* dgate, Tensor* dup,
                           WeightGradients& weight_gradients) {
  EnsureShape(dx, a.x.shape());
  EnsureShape(dact, a.gate.shape());
  // Recomputed (selective recompute) with the forward's op, so bit for bit;
  // allocated here, so a deferred W keeps it alive without a copy.
  Tensor recomputed;
  WeightGradients& w = weight_gradients;
  const Tensor kept_dy = w.Keep(dy);
  if (!a.act.defined()) recomputed = Tensor::Empty(a.gate.shape(), a.gate.dtype(), a.gate.device());
  EnsureShape(dgate, a.gate.shape());
  EnsureShape(dup, a.up.shape());
  int64_t begin = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t end = begin + a.rows[e];
    if (end > begin) {
      const ExpertWeights& weights = experts[e];
      const Tensor x = a.x.Slice(begin, end), gate = a.gate.Slice(begin, end),
                   up = a.up.Slice(begin, end);
      const Tensor act = (a.act.defined() ? a.act : recomputed).Slice(begin, end);
      if (!a.act.defined()) ops::Swiglu(gate, up, act);
      const Tensor da = dact->Slice(begin, end), dg = dgate->Slice(begin, end),
                   du = dup->Slice(begin, end), d_in = dx->Slice(begin, end);
      w.LinearBackward(kept_dy.Slice(begin, end), act, weights.down_proj, da, weights.down_grad);
      ops::SwigluBackward(da, gate, up, dg, du);
      w.LinearBackward(w.Keep(dg), x, weights.gate_proj, d_in, weights.gate_grad);
      w.LinearBackward(w.Keep(du), x, weights.up_proj, d_in, weights.up_grad,
                       /*accumulate_dx=*/true);
    }
    begin = end;
  }
}

}  // namespace tetra
