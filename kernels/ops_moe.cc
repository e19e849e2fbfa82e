// The mixture-of-experts ops of the op API (kernels/ops.h): the router and the
// token dispatch.
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>

#include "kernels/cpu/moe_dispatch.h"
#include "kernels/cpu/router.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void RouterScores(const RouterSpec& spec, const Tensor& logits, const Tensor& scores) {
  CheckRouter("router scores", spec, logits, Tensor());
  TETRA_CHECK(scores.shape() == logits.shape() && scores.dtype() == DType::kF32)
      << "router scores " << ShapeString(scores.shape()) << " of logits "
      << ShapeString(logits.shape());
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) { return cuda::RouterScores(spec, logits, scores); });
  ExpectHost(logits, scores);
  HostF32 f32;
  cpu::RouterScores(spec, f32.In(logits), logits.dim(0), f32.Out(scores));
}

void RouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                const Tensor& expert, const Tensor& weights) {
  CheckRouterTopK(spec, scores, bias, expert, weights);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) { return cuda::RouterTopK(spec, scores, bias, expert, weights); });
  ExpectHost(scores, bias, expert, weights);
  HostF32 f32;
  cpu::RouterTopK(spec, f32.In(scores), f32.In(bias), scores.dim(0), expert.data<int32_t>(),
                  f32.Out(weights));
}

void RouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                           const Tensor& dweights, const Tensor& dscores) {
  CheckRouterWeightsBackward(spec, scores, expert, dweights, dscores);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda(
        [&](auto) { return cuda::RouterWeightsBackward(spec, scores, expert, dweights, dscores); });
  ExpectHost(scores, expert, dweights, dscores);
  HostF32 f32;
  cpu::RouterWeightsBackward(spec, f32.In(scores), expert.data<int32_t>(), f32.In(dweights),
                             scores.dim(0), f32.Out(dscores));
}

void RouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                          const Tensor& dlogits) {
  CheckRouterScoresBackward(spec, scores, dscores, dlogits);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) { return cuda::RouterScoresBackward(spec, scores, dscores, dlogits); });
  ExpectHost(scores, dscores, dlogits);
  HostF32 f32;
  cpu::RouterScoresBackward(spec, f32.In(scores), f32.In(dscores), scores.dim(0), f32.Out(dlogits));
}

void SequenceBalanceStats(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, const Tensor& stats) {
  CheckSequenceBalance("sequence balance stats", spec, scores, expert, batch, seq, whole_seq,
                       stats);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) {
      return cuda::SequenceBalanceStats(spec, scores, expert, batch, seq, whole_seq, stats);
    });
  ExpectHost(scores, expert, stats);
  HostF32 f32;
  cpu::SequenceBalanceStats(spec, f32.In(scores), expert.data<int32_t>(), batch, seq, whole_seq,
                            stats.data<double>());
}

double SequenceBalanceLoss(const RouterSpec& spec, const Tensor& scores, const Tensor& stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           const Tensor& dscores) {
  CheckSequenceBalance("sequence balance loss", spec, scores, Tensor(), batch, seq, whole_seq,
                       stats, dscores);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda<double>([&](auto) {
      return cuda::SequenceBalanceLoss(spec, scores, stats, batch, seq, whole_seq, grad_scale,
                                       dscores);
    });
  ExpectHost(scores, stats, dscores);
  HostF32 f32;
  return cpu::SequenceBalanceLoss(spec, f32.In(scores), stats.data<double>(), batch, seq, whole_seq,
                                  grad_scale, f32.Out(dscores));
}

void CountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads) {
  CheckCountExpertLoads(spec, expert, loads);
  const OpTimer op_timer(__func__, expert.device());
  if (OnDevice(expert))
    return OnCuda([&](auto) { return cuda::CountExpertLoads(spec, expert, loads); });
  ExpectHost(expert, loads);
  cpu::CountExpertLoads(spec, expert.data<int32_t>(), expert.numel() / spec.top_k,
                        loads.data<int32_t>());
}

void UpdateRouterBias(const Tensor& loads, double speed, const Tensor& bias) {
  CheckUpdateRouterBias(loads, bias);
  const OpTimer op_timer(__func__, bias.device());
  if (OnDevice(bias))
    return OnCuda([&](auto) { return cuda::UpdateRouterBias(loads, speed, bias); });
  ExpectHost(loads, bias);
  cpu::UpdateRouterBias(loads.data<int32_t>(), static_cast<int>(bias.numel()), speed, bias.f32());
}

void DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                   const Tensor& send_row, const Tensor& send_token, const Tensor& expert_counts) {
  CheckDispatchOrder(expert, weights, send_row, send_token, expert_counts);
  const OpTimer op_timer(__func__, expert.device());
  if (OnDevice(expert)) {
    OnCuda([&](auto) {
      cuda::DispatchOrder(expert, weights, capacity, send_row, send_token, expert_counts);
    });
    return;
  }
  ExpectHost(expert, weights, send_row, send_token, expert_counts);
  HostF32 f32;
  cpu::DispatchOrder(expert.data<int32_t>(), f32.In(weights), expert.dim(0),
                     static_cast<int>(expert.dim(1)), static_cast<int>(expert_counts.numel()),
                     capacity, send_row.data<int32_t>(), send_token.data<int32_t>(),
                     expert_counts.data<int32_t>());
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  CheckGatherRows(src, index, dst);
  const OpTimer op_timer(__func__, src.device());
  if (OnDevice(src)) return OnCuda([&](auto) { return cuda::GatherRows(src, index, dst); });
  ExpectHost(src, index, dst);
  HostF32 f32;
  cpu::GatherRows(f32.In(src), Rows(src), index.data<int32_t>(), index.numel(), src.dim(-1),
                  f32.Out(dst));
}

void CombineRows(const Tensor& src, const Tensor& index, const Tensor& weights, const Tensor& dst) {
  CheckCombineRows(src, index, weights, dst);
  const int64_t n = Rows(dst), c = dst.dim(-1);
  const OpTimer op_timer(__func__, dst.device());
  if (OnDevice(dst))
    return OnCuda([&](auto) { return cuda::CombineRows(src, index, weights, dst); });
  ExpectHost(src, index, weights, dst);
  HostF32 f32;
  cpu::CombineRows(f32.In(src), Rows(src), index.data<int32_t>(), f32.In(weights), n,
                   static_cast<int>(index.dim(1)), c, f32.Out(dst));
}

void CombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                         const Tensor& weights, const Tensor& dsrc, const Tensor& dweights) {
  CheckCombineRowsBackward(ddst, src, index, weights, dsrc, dweights);
  const int64_t n = Rows(ddst), c = ddst.dim(-1);
  const OpTimer op_timer(__func__, ddst.device());
  if (OnDevice(ddst))
    return OnCuda(
        [&](auto) { return cuda::CombineRowsBackward(ddst, src, index, weights, dsrc, dweights); });
  ExpectHost(ddst, src, index, weights, dsrc, dweights);
  HostF32 f32;
  cpu::CombineRowsBackward(f32.In(ddst), f32.In(src), Rows(src), index.data<int32_t>(),
                           f32.In(weights), n, static_cast<int>(index.dim(1)), c, f32.Out(dsrc),
                           f32.Out(dweights));
}

}  // namespace tetra::ops
