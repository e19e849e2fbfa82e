#include "moe/dispatcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/logging.h"
#include "core/profiler.h"

namespace tetra {
namespace {

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

void CopyRow(const Tensor& from, int64_t from_row, const Tensor& to, int64_t to_row) {
  const int64_t c = from.dim(1);
  std::memcpy(to.f32() + to_row * c, from.f32() + from_row * c, c * sizeof(float));
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

void TokenDispatcher::Plan(const std::vector<int32_t>& expert, const Tensor& weights,
                           DispatchPlan* plan) {
  const int64_t pairs = static_cast<int64_t>(expert.size());
  plan->top_k = top_k_;
  plan->tokens = pairs / top_k_;
  // The pairs of each expert, in pair order.
  std::vector<std::vector<int64_t>> by_expert(num_experts_);
  for (int64_t p = 0; p < pairs; ++p) by_expert[expert[p]].push_back(p);
  plan->dropped = 0;
  if (capacity_factor_ > 0) {
    const auto capacity = static_cast<size_t>(
        std::ceil(capacity_factor_ * static_cast<double>(pairs) / num_experts_));
    const float* w = weights.f32();
    for (auto& list : by_expert) {
      if (list.size() <= capacity) continue;
      // Keep the highest weights (ties: the earlier pair), then restore pair order.
      std::stable_sort(list.begin(), list.end(), [&](int64_t a, int64_t b) { return w[a] > w[b]; });
      plan->dropped += static_cast<int64_t>(list.size() - capacity);
      list.resize(capacity);
      std::sort(list.begin(), list.end());
    }
  }
  plan->send_row.assign(pairs, -1);
  plan->send_token.clear();
  std::vector<int32_t> expert_counts(num_experts_);
  for (int e = 0; e < num_experts_; ++e) {
    expert_counts[e] = static_cast<int32_t>(by_expert[e].size());
    for (int64_t p : by_expert[e]) {
      plan->send_row[p] = static_cast<int64_t>(plan->send_token.size());
      plan->send_token.push_back(static_cast<int32_t>(p / top_k_));
    }
  }
  const int ranks = ep_.size(), local = local_experts_;
  plan->send_counts.assign(ranks, 0);
  for (int e = 0; e < num_experts_; ++e) plan->send_counts[e / local] += expert_counts[e];
  plan->send_offsets = Offsets(plan->send_counts);
  // from[r * local + e]: rows rank r sends to this rank's expert e.
  std::vector<int32_t> from(num_experts_);
  ep_.AllToAll(expert_counts.data(), from.data(), local, DType::kI32);
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
  plan->grouped_row.clear();
  for (int r = 0; r < ranks; ++r) {
    for (int e = 0; e < local; ++e) {
      for (int32_t i = 0; i < from[r * local + e]; ++i) plan->grouped_row.push_back(next[e]++);
    }
  }
}

void TokenDispatcher::Permute(const DispatchPlan& plan, const Tensor& x, Tensor* send) const {
  EnsureShape(send, {static_cast<int64_t>(plan.send_token.size()), x.dim(1)});
  for (size_t row = 0; row < plan.send_token.size(); ++row) {
    CopyRow(x, plan.send_token[row], *send, row);
  }
}

void TokenDispatcher::Unpermute(const DispatchPlan& plan, const Tensor& dsend,
                                const Tensor& dx) const {
  const int64_t c = dx.dim(1);
  dx.SetZero();
  for (size_t row = 0; row < plan.send_token.size(); ++row) {
    const float* from = dsend.f32() + row * c;
    float* to = dx.f32() + plan.send_token[row] * c;
    for (int64_t i = 0; i < c; ++i) to[i] += from[i];
  }
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
  ep_.AllToAllV(from.raw(), scaled(from_counts), scaled(from_offsets), to.raw(),
                scaled(to_counts), scaled(to_offsets), DType::kF32);
  for (int r = 0; r < ep_.size(); ++r) {
    if (r != ep_.rank()) bytes_ += static_cast<double>(from_counts[r] * c) * sizeof(float);
  }
}

void TokenDispatcher::ToExperts(const DispatchPlan& plan, const Tensor& send, Tensor* grouped) {
  const int64_t rows = static_cast<int64_t>(plan.grouped_row.size()), c = send.dim(1);
  EnsureShape(&received_, {rows, c});
  EnsureShape(grouped, {rows, c});
  Exchange(send, plan.send_counts, plan.send_offsets, received_, plan.recv_counts,
           plan.recv_offsets);
  for (int64_t i = 0; i < rows; ++i) CopyRow(received_, i, *grouped, plan.grouped_row[i]);
}

void TokenDispatcher::FromExperts(const DispatchPlan& plan, const Tensor& grouped, Tensor* send) {
  const int64_t rows = static_cast<int64_t>(plan.grouped_row.size()), c = grouped.dim(1);
  EnsureShape(&received_, {rows, c});
  EnsureShape(send, {static_cast<int64_t>(plan.send_token.size()), c});
  for (int64_t i = 0; i < rows; ++i) CopyRow(grouped, plan.grouped_row[i], received_, i);
  Exchange(received_, plan.recv_counts, plan.recv_offsets, *send, plan.send_counts,
           plan.send_offsets);
}

void TokenDispatcher::Combine(const DispatchPlan& plan, const Tensor& weights, const Tensor& y,
                              const Tensor& out) const {
  const int64_t c = out.dim(1), k = plan.top_k;
  out.SetZero();
  for (int64_t t = 0; t < plan.tokens; ++t) {
    float* o = out.f32() + t * c;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = plan.send_row[t * k + j];
      if (row < 0) continue;
      const float w = weights.f32()[t * k + j];
      const float* from = y.f32() + row * c;
      for (int64_t i = 0; i < c; ++i) o[i] += w * from[i];
    }
  }
}

void TokenDispatcher::CombineBackward(const DispatchPlan& plan, const Tensor& weights,
                                      const Tensor& y, const Tensor& dout, Tensor* dy,
                                      const Tensor& dweights) const {
  const int64_t c = dout.dim(1), k = plan.top_k;
  EnsureShape(dy, y.shape());
  for (int64_t t = 0; t < plan.tokens; ++t) {
    const float* d = dout.f32() + t * c;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = plan.send_row[t * k + j];
      float& dw = dweights.f32()[t * k + j];
      dw = 0;
      if (row < 0) continue;  // a dropped pair adds nothing, so gets no gradient
      const float w = weights.f32()[t * k + j];
      const float* from = y.f32() + row * c;
      float* to = dy->f32() + row * c;
      for (int64_t i = 0; i < c; ++i) {
        dw += d[i] * from[i];
        to[i] = w * d[i];
      }
    }
  }
}

}  // namespace tetra
