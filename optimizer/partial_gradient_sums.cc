#include "optimizer/partial_gradient_sums.h"

#include <algorithm>

#include "core/logging.h"

namespace tetra {

PartialGradientSums::PartialGradientSums(const ParameterStore& store,
                                         const std::vector<FlatRange>& owned)
    : flat_grads_(store.flat_grads()) {
  for (const Parameter& p : store.all()) {
    if (p.grad_partial_over == nullptr || p.grad_partial_over->size() == 1) continue;
    TETRA_CHECK(!p.expert) << p.name
                           << ": a routed expert's gradient summed over a group is not supported";
    auto group = std::find_if(groups_.begin(), groups_.end(),
                              [&](const Group& g) { return g.comm == p.grad_partial_over; });
    if (group == groups_.end())
      group = groups_.insert(groups_.end(), Group{p.grad_partial_over, {}, Tensor()});
    const FlatRange whole{p.flat_offset, p.flat_offset + p.grad.numel()};
    for (const FlatRange& mine : owned) {
      const FlatRange part{std::max(whole.begin, mine.begin), std::min(whole.end, mine.end)};
      if (part.size() > 0) group->ranges.push_back(part);
    }
  }
  for (Group& g : groups_) {
    int64_t total = 0;
    for (const FlatRange& r : g.ranges) total += r.size();
    g.packed = Tensor::Empty({total}, DType::kF32, flat_grads_.device());
  }
}

void PartialGradientSums::Sum() {
  for (Group& g : groups_) {
    int64_t at = 0;
    for (const FlatRange& r : g.ranges) {
      g.packed.Slice(at, at + r.size()).CopyFrom(flat_grads_.Slice(r.begin, r.end));
      at += r.size();
    }
    // No comm span: the metrics count tensor-parallel waits inside fwd_s and
    // bwd_s (observe/step_timing.h), and this one lies outside both.
    g.comm->AllReduce(g.packed, g.packed, ReduceOp::kSum);
    at = 0;
    for (const FlatRange& r : g.ranges) {
      flat_grads_.Slice(r.begin, r.end).CopyFrom(g.packed.Slice(at, at + r.size()));
      at += r.size();
    }
  }
}

}  // namespace tetra
