// Token dispatch for a mixture-of-experts layer: every (token, choice) pair
// of a micro-batch goes to its expert's rank and comes back.
//
//   forward:  x (N, C) --Permute--> send (M, C), rows grouped by expert
//             --ToExperts (all-to-all-v over ep)--> grouped (R, C), this
//             rank's experts' rows, grouped by local expert
//             ... experts ... --FromExperts--> y send (M, C) --Combine--> out (N, C)
//   backward: the same path with the adjoints (CombineBackward, ToExperts,
//             experts' backward, FromExperts, Unpermute).
//
// This file orchestrates: the row arithmetic is the op API's (DispatchOrder,
// GatherRows, CombineRows and its backward in kernels/ops.h), the exchange
// the communicator's, in the activations' dtype and on their device. Experts
// are split evenly over the expert-parallel group ep: rank r holds experts
// [r E / ep, (r + 1) E / ep). With one rank the exchanges are copies.
// Dropless unless capacity_factor c > 0: then each expert takes at most
// ceil(c N k / E) of the micro-batch's pairs, keeping the highest weights.
#ifndef TETRA_MOE_DISPATCHER_H_
#define TETRA_MOE_DISPATCHER_H_

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "moe/router.h"

namespace tetra {

// Where one micro-batch's pairs go; made by TokenDispatcher::Plan, kept for the backward.
struct DispatchPlan {
  Tensor send_row;       // (N, k) int32: each pair's row in send; -1 when dropped
  Tensor send_token;     // (N k) int32: the token of each send row (the first M)
  Tensor expert_counts;  // (E) int32: send rows of each expert
  int64_t rows = 0;      // M, the pairs kept
  std::vector<int64_t> send_counts, send_offsets;  // rows to each ep rank (M in all)
  std::vector<int64_t> recv_counts, recv_offsets;  // rows from each ep rank (R in all)
  // Rows arrive grouped by (source rank, local expert); the experts take them
  // grouped by (local expert, source rank): these block moves turn one into
  // the other.
  struct RowBlock {
    int64_t arrival = 0, grouped = 0, rows = 0;  // first row in each order, rows
  };
  std::vector<RowBlock> blocks;
  std::vector<int64_t> expert_rows;  // rows of each local expert in grouped (R in all)
  int64_t dropped = 0;               // pairs over capacity
};

class TokenDispatcher {
 public:
  // `ep` must outlive this.
  TokenDispatcher(int num_experts, int top_k, double capacity_factor, Communicator& ep);

  int local_experts() const { return local_experts_; }
  // Whether rows travel between ranks; without, ToExperts and FromExperts
  // only name their input as their output (no copy).
  bool exchanges() const { return ep_.size() > 1; }
  int first_expert() const { return ep_.rank() * local_experts_; }

  // The router's choice. Collective over ep (the per-expert counts are exchanged).
  void Plan(const Routing& routing, DispatchPlan* plan);
  // x (N, C) -> *send (M, C): each kept pair's token row.
  void Permute(const DispatchPlan& plan, const Tensor& x, Tensor* send) const;
  // dsend (M, C) -> dx (N, C), written: the sum over each token's pairs (Permute's adjoint).
  void Unpermute(const DispatchPlan& plan, const Tensor& dsend, const Tensor& dx) const;
  // send (M, C) -> *grouped (R, C), rows of this rank's experts (collective
  // over ep; without exchanges *grouped becomes send itself).
  void ToExperts(const DispatchPlan& plan, const Tensor& send, Tensor* grouped);
  // grouped (R, C) -> *send (M, C), ToExperts' inverse (collective over ep;
  // without exchanges *send becomes grouped itself).
  void FromExperts(const DispatchPlan& plan, const Tensor& grouped, Tensor* send);
  // out (N, C) = sum over kept pairs j of weights[t, j] y[send_row], written.
  void Combine(const DispatchPlan& plan, const Tensor& weights, const Tensor& y,
               const Tensor& out) const;
  // dout (N, C) -> *dy (M, C) and dweights (N, k), written.
  void CombineBackward(const DispatchPlan& plan, const Tensor& weights, const Tensor& y,
                       const Tensor& dout, Tensor* dy, const Tensor& dweights) const;

  // Bytes sent in the all-to-alls since the last ResetCounters (their wait is
  // a kCommEp span of core/profiler.h).
  double all_to_all_bytes() const { return bytes_; }
  void ResetCounters() { bytes_ = 0; }

 private:
  // Rows of `from` (blocks from_counts/offsets) to `to` over ep.
  void Exchange(const Tensor& from, const std::vector<int64_t>& from_counts,
                const std::vector<int64_t>& from_offsets, const Tensor& to,
                const std::vector<int64_t>& to_counts, const std::vector<int64_t>& to_offsets);

  int num_experts_, top_k_, local_experts_;
  double capacity_factor_;
  Communicator& ep_;
  Tensor received_;  // (R, C) rows in arrival order
  double bytes_ = 0;
};

}  // namespace tetra

#endif  // TETRA_MOE_DISPATCHER_H_
