#include "observe/step_timing.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>

#include "core/profiler.h"
#include "observe/straggler_detector.h"

namespace tetra {

StepTiming StepTiming::FromProfiler() {
  const Profiler& p = Profiler::Get();
  StepTiming t;
  t.fwd_s = p.TotalSeconds(SpanKind::kForward);
  t.bwd_s = p.TotalSeconds(SpanKind::kBackward);
  t.optimizer_s = p.TotalSeconds(SpanKind::kOptimizer);
  t.comm_tp_s = p.TotalSeconds(SpanKind::kCommTp);
  t.comm_dp_s = p.TotalSeconds(SpanKind::kCommDp);
  t.comm_pp_s = p.TotalSeconds(SpanKind::kCommPp);
  t.comm_ep_s = p.TotalSeconds(SpanKind::kCommEp);
  t.peak_memory_bytes = PeakResidentBytes();
  return t;
}

double PeakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

namespace {

constexpr int kFields = 12,
              kMeans = 7;  // the first kMeans are averaged, the rest the largest taken

// The slowest rank from every rank's fields as AddStepTiming gathers them.
void AddStraggler(const std::vector<double>& all, StepMetrics& m) {
  std::vector<double> compute_s;
  for (size_t at = 0; at < all.size(); at += kFields) {
    const StepTiming rank{.fwd_s = all[at],
                          .bwd_s = all[at + 1],
                          .optimizer_s = all[at + 2],
                          .comm_tp_s = all[at + 3],
                          .comm_ep_s = all[at + 6]};
    compute_s.push_back(rank.ComputeSeconds());
  }
  const StragglerStats straggler = FindStraggler(compute_s);
  m.slowest_rank = straggler.slowest_rank;
  m.straggler_ratio = straggler.ratio;
}

}  // namespace

void AddStepTiming(Communicator& world, const MeshShape& layout, const StepTiming& local,
                   StepMetrics& m) {
  std::array<double, kFields> mine = {local.fwd_s,
                                      local.bwd_s,
                                      local.optimizer_s,
                                      local.comm_tp_s,
                                      local.comm_dp_s,
                                      local.comm_pp_s,
                                      local.comm_ep_s,
                                      local.peak_memory_bytes,
                                      local.device_mallocs.value_or(-1),
                                      local.device_launches.value_or(-1),
                                      local.host_waits.value_or(-1),
                                      local.device_allocations.value_or(-1)};
  // Every rank's fields, one F64 gather per step.
  std::vector<double> all(kFields * world.size());
  world.AllGather(Tensor::View(mine.data(), {kFields}, DType::kF64),
                  Tensor::View(all.data(), {kFields * world.size()}, DType::kF64));
  std::array<double, kFields> mean{};
  std::array<double, kFields> largest;
  largest.fill(-1);
  for (int r = 0; r < world.size(); ++r) {
    for (int f = 0; f < kMeans; ++f) mean[f] += all[r * kFields + f] / world.size();
    for (int f = kMeans; f < kFields; ++f) largest[f] = std::max(largest[f], all[r * kFields + f]);
  }
  m.fwd_s = mean[0];
  m.bwd_s = mean[1];
  m.optimizer_s = mean[2];
  m.comm_exposed_s = mean[3] + mean[4] + mean[5] + mean[6];
  if (layout.tp > 1) m.comm_exposed_s_tp = mean[3];
  if (layout.world > 1) m.comm_exposed_s_dp = mean[4];
  if (layout.pp > 1) m.comm_exposed_s_pp = mean[5];
  if (mean[6] > 0) m.comm_exposed_s_ep = mean[6];
  m.peak_memory_bytes = std::max(0.0, largest[kMeans]);
  // -1: a count the ranks do not keep (a CPU run).
  const auto count = [&](int f) {
    return largest[f] >= 0 ? std::optional(largest[f]) : std::nullopt;
  };
  m.device_mallocs = count(kMeans + 1);
  m.device_launches = count(kMeans + 2);
  m.host_waits = count(kMeans + 3);
  m.device_allocations = count(kMeans + 4);
  if (world.size() > 1) AddStraggler(all, m);
}

}  // namespace tetra
