#include "moe/dispatcher.h"

#include <cmath>
#include <numeric>

#include "core/logging.h"
#include "core/profiler.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

}  // namespace

TokenDispatcher::TokenDispatcher(int num_experts, int top_k, double capacity_factor,
                                 Communicator& ep)
    : num_experts_(num_experts),
      top_k_(top_k),
      local_experts_(num_experts / ep.size()),
      capacity_factor_(capacity_factor),
      ep_(ep) {
  TETRA_CHECK(num_experts % ep.size() == 0)
      << num_experts << " experts do not split evenly over " << ep.size() << " ranks";
}

void TokenDispatcher::Plan(const Routing& routing, DispatchPlan* plan) {
  const int64_t pairs = routing.expert.numel();
  const DeviceType device = routing.expert.device();
  const int64_t capacity = capacity_factor_ > 0
                               ? static_cast<int64_t>(std::ceil(
                                     capacity_factor_ * static_cast<double>(pairs) / num_experts_))
                               : -1;
  EnsureShape(&plan->send_row, routing.expert.shape(), DType::kI32, device);
  EnsureShape(&plan->send_token, {pairs}, DType::kI32, device);
  EnsureShape(&plan->expert_counts, {num_experts_}, DType::kI32, device);
  ops::DispatchOrder(routing.expert, routing.weights, capacity, plan->send_row, plan->send_token,
                     plan->expert_counts);
  // The counts steer the all-to-all and size the rows: the one read of the
  // device per plan.
  const Tensor counts = OnHost(plan->expert_counts);
  const int32_t* expert_counts = counts.data<int32_t>();
  plan->rows = std::accumulate(expert_counts, expert_counts + num_experts_, int64_t{0});
  plan->dropped = pairs - plan->rows;
  const int ranks = ep_.size(), local = local_experts_;
  plan->send_counts.assign(ranks, 0);
  for (int e = 0; e < num_experts_; ++e) plan->send_counts[e / local] += expert_counts[e];
  plan->send_offsets = Offsets(plan->send_counts);
  // from[r * local + e]: rows rank r sends to this rank's expert e.
  std::vector<int32_t> from(num_experts_);
  ep_.AllToAll(counts, Tensor::View(from.data(), {num_experts_}, DType::kI32));
  plan->recv_counts.assign(ranks, 0);
  plan->expert_rows.assign(local, 0);
  for (int r = 0; r < ranks; ++r) {
    for (int e = 0; e < local; ++e) {
      plan->recv_counts[r] += from[r * local + e];
      plan->expert_rows[e] += from[r * local + e];
    }
  }
  plan->recv_offsets = Offsets(plan->recv_counts);
  // Arrival order is (source rank, expert); grouped order is (expert, source rank).
  std::vector<int64_t> next = Offsets(plan->expert_rows);
  plan->blocks.clear();
  int64_t arrival = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int e = 0; e < local; ++e) {
      const int64_t rows = from[r * local + e];
      if (rows > 0) plan->blocks.push_back({arrival, next[e], rows});
      arrival += rows;
      next[e] += rows;
    }
  }
}

void TokenDispatcher::Permute(const DispatchPlan& plan, const Tensor& x, Tensor* send) const {
  EnsureShape(send, {plan.rows, x.dim(1)}, x.dtype(), x.device());
  ops::GatherRows(x, plan.send_token.Slice(0, plan.rows), *send);
}

void TokenDispatcher::Unpermute(const DispatchPlan& plan, const Tensor& dsend,
                                const Tensor& dx) const {
  ops::CombineRows(dsend, plan.send_row, Tensor(), dx);
}

void TokenDispatcher::Exchange(const Tensor& from, const std::vector<int64_t>& from_counts,
                               const std::vector<int64_t>& from_offsets, const Tensor& to,
                               const std::vector<int64_t>& to_counts,
                               const std::vector<int64_t>& to_offsets) {
  const int64_t c = from.dim(1);
  auto scaled = [c](const std::vector<int64_t>& rows) {
    std::vector<int64_t> elements(rows);
    for (int64_t& v : elements) v *= c;
    return elements;
  };
  const ScopedSpan span(SpanKind::kCommEp);
  ep_.AllToAllV(from, scaled(from_counts), scaled(from_offsets), to, scaled(to_counts),
                scaled(to_offsets));
  for (int r = 0; r < ep_.size(); ++r) {
    if (r != ep_.rank())
      bytes_ += static_cast<double>(from_counts[r] * c) * DTypeSize(from.dtype());
  }
}

void TokenDispatcher::ToExperts(const DispatchPlan& plan, const Tensor& send, Tensor* grouped) {
  if (!exchanges()) {
    *grouped = send;  // one rank: arrival and grouped orders are the send order
    return;
  }
  const int64_t rows =
      plan.recv_offsets.empty() ? 0 : plan.recv_offsets.back() + plan.recv_counts.back();
  EnsureShape(&received_, {rows, send.dim(1)}, send.dtype(), send.device());
  EnsureShape(grouped, {rows, send.dim(1)}, send.dtype(), send.device());
  Exchange(send, plan.send_counts, plan.send_offsets, received_, plan.recv_counts,
           plan.recv_offsets);
  for (const DispatchPlan::RowBlock& b : plan.blocks) {
    grouped->Slice(b.grouped, b.grouped + b.rows)
        .CopyFrom(received_.Slice(b.arrival, b.arrival + b.rows));
  }
}

void TokenDispatcher::FromExperts(const DispatchPlan& plan, const Tensor& grouped, Tensor* send) {
  if (!exchanges()) {
    *send = grouped;
    return;
  }
  EnsureShape(&received_, grouped.shape(), grouped.dtype(), grouped.device());
  EnsureShape(send, {plan.rows, grouped.dim(1)}, grouped.dtype(), grouped.device());
  for (const DispatchPlan::RowBlock& b : plan.blocks) {
    received_.Slice(b.arrival, b.arrival + b.rows)
        .CopyFrom(grouped.Slice(b.grouped, b.grouped + b.rows));
  }
  Exchange(received_, plan.recv_counts, plan.recv_offsets, *send, plan.send_counts,
           plan.send_offsets);
}

void TokenDispatcher::Combine(const DispatchPlan& plan, const Tensor& weights, const Tensor& y,
                              const Tensor& out) const {
  ops::CombineRows(y, plan.send_row, weights, out);
}

void TokenDispatcher::CombineBackward(const DispatchPlan& plan, const Tensor& weights,
                                      const Tensor& y, const Tensor& dout, Tensor* dy,
                                      const Tensor& dweights) const {
  EnsureShape(dy, y.shape(), y.dtype(), y.device());
  ops::CombineRowsBackward(dout, y, plan.send_row, weights, *dy, dweights);
}

}  // namespace tetra
