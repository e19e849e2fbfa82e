#include "moe/grouped_experts.h"

#include <functional>

#include "core/logging.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

// Calls `each(e, begin, end)` for every expert e with rows [begin, end) of
// the grouped buffer (none for an expert without rows); returns the rows in all.
int64_t ForEachExpert(const std::vector<int64_t>& rows,
                      const std::function<void(size_t, int64_t, int64_t)>& each) {
  int64_t begin = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t end = begin + rows[e];
    if (end > begin) each(e, begin, end);
    begin = end;
  }
  return begin;
}

}  // namespace

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
  // The SwiGLU is row by row: one pass over every expert's rows between the GEMMs.
  const int64_t summed = ForEachExpert(rows, [&](size_t e, int64_t begin, int64_t end) {
    const Tensor x_rows = a->x.Slice(begin, end);
    ops::Linear(x_rows, experts[e].gate_proj, a->gate.Slice(begin, end));
    ops::Linear(x_rows, experts[e].up_proj, a->up.Slice(begin, end));
  });
  TETRA_CHECK(summed == total) << "expert row counts sum to " << summed << ", not " << total;
  if (total > 0) ops::Swiglu(a->gate, a->up, a->act);
  ForEachExpert(rows, [&](size_t e, int64_t begin, int64_t end) {
    ops::Linear(a->act.Slice(begin, end), experts[e].down_proj, y->Slice(begin, end));
  });
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
  const Tensor act = a.act.defined() ? a.act : recomputed;
  const bool any = a.x.dim(0) > 0;
  if (!a.act.defined() && any) ops::Swiglu(a.gate, a.up, act);
  ForEachExpert(a.rows, [&](size_t e, int64_t begin, int64_t end) {
    w.LinearBackward(kept_dy.Slice(begin, end), act.Slice(begin, end), experts[e].down_proj,
                     dact->Slice(begin, end), experts[e].down_grad);
  });
  if (any) ops::SwigluBackward(*dact, a.gate, a.up, *dgate, *dup);
  const Tensor kept_dgate = w.Keep(*dgate), kept_dup = w.Keep(*dup);
  ForEachExpert(a.rows, [&](size_t e, int64_t begin, int64_t end) {
    const ExpertWeights& weights = experts[e];
    const Tensor x = a.x.Slice(begin, end), d_in = dx->Slice(begin, end);
    w.LinearBackward(kept_dgate.Slice(begin, end), x, weights.gate_proj, d_in, weights.gate_grad);
    w.LinearBackward(kept_dup.Slice(begin, end), x, weights.up_proj, d_in, weights.up_grad,
                     /*accumulate_dx=*/true);
  });
}

}  // namespace tetra
