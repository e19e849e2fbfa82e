// Per-step metrics: one JSON object per optimizer step appended to
// log.metrics_path (docs/architecture.md's field names), and the human progress line.
#ifndef TETRA_OBSERVE_METRICS_LOG_H_
#define TETRA_OBSERVE_METRICS_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/mesh.h"
#include "proto/config.pb.h"

namespace tetra {

// The run's layout and batch shape: the first line a run writes carries it,
// so a report can tell runs apart from their metrics files alone.
struct RunLayout {
  MeshShape mesh;
  int global_batch_size = 0, micro_batch_size = 0, seq_length = 0, zero_stage = 0;
  // parallel.schedule and parallel.virtual_stages as the config states them
  // (pipeline/schedule.h's ScheduleSpecFromConfig says what a pipeline of
  // mesh.pp stages runs): a report compares the measured bubble with the
  // schedule's theory.
  ParallelConfig::Schedule schedule = ParallelConfig::ONE_F_ONE_B;
  int virtual_stages = 1;
  // global_batch_size / (micro_batch_size x data): per data-parallel rank and step.
  int micro_batches() const { return global_batch_size / (micro_batch_size * mesh.dp); }

  // `config`'s run on `mesh`.
  static RunLayout Of(const MeshShape& mesh, const TrainerConfig& config) {
    return {.mesh = mesh,
            .global_batch_size = config.train().global_batch_size(),
            .micro_batch_size = config.train().micro_batch_size(),
            .seq_length = config.train().seq_length(),
            .zero_stage = config.optimizer().zero_stage(),
            .schedule = config.parallel().schedule(),
            .virtual_stages = config.parallel().virtual_stages()};
  }
};

struct StepMetrics {
  int step = 0;
  double loss = 0;  // mean token cross-entropy over the global batch
  double lr = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  double tokens_per_s = 0;
  double tflops = 0;  // achieved model TFLOP/s per rank
  double step_time_s = 0;
  std::optional<double> mfu;         // tflops / device peak, when the peak is known
  std::optional<double> loss_floor;  // synthetic data only
  std::optional<double> val_loss;    // evaluation steps only
  // Bytes per rank, each the largest over ranks (multi-rank runs).
  std::optional<double> param_bytes, grad_bytes, optimizer_bytes;
  std::optional<double> comm_exposed_s_dp;  // the step's wait on data-parallel communication
  std::optional<double> bubble_fraction;    // pipeline wait over step time (pipeline > 1)
  // The time breakdown (observe/step_timing.h): means over ranks, in seconds.
  std::optional<double> fwd_s, bwd_s, optimizer_s;
  std::optional<double> comm_exposed_s;  // the sum over groups
  std::optional<double> comm_exposed_s_tp, comm_exposed_s_ep, comm_exposed_s_pp;
  std::optional<double> peak_memory_bytes;  // largest over ranks
  // Device runs: cudaMalloc and cudaFree calls the step made (each waits for
  // the device), largest over ranks; 0 where memory comes from the pool.
  std::optional<double> device_mallocs;
  // Device runs: the step's launches (kernels, library calls, copies), host
  // waits (on the device or a collective) and device allocations, largest
  // over ranks (core/device_work.h).
  std::optional<double> device_launches, host_waits, device_allocations;
  std::optional<RunLayout> run;  // the first line of a run only
  // Mixture-of-experts models: the balance term as added to the objective
  // (alpha included, summed over layers), the max over layers of max / mean
  // tokens per expert, pairs dropped over capacity, the all-to-all bytes this
  // rank sent and the seconds the step waited on them.
  std::optional<double> aux_loss, moe_load_imbalance, dropped_tokens;
  std::optional<double> all_to_all_bytes;  // the wait on them is comm_exposed_s_ep
  // Multi-token prediction: the mean over depths of each depth's mean
  // cross-entropy (the objective adds train.mtp_loss_scaling_factor times it).
  std::optional<double> mtp_loss;
  // Seconds the main thread spent on checkpoints after the previous step,
  // before this one began (the whole save when synchronous; with
  // checkpoint.async the snapshot, waits for a save in flight, and commits),
  // the largest over ranks; absent after steps that did none.
  std::optional<double> checkpoint_stall_s;
  // Multi-rank runs: the world rank whose compute (StepTiming::ComputeSeconds)
  // took longest, and its time over the median rank's
  // (observe/straggler_detector.h).
  std::optional<int> slowest_rank;
  std::optional<double> straggler_ratio;
};

// Every per-step number of `m` (its optional fields when present) by its
// metrics name, in contract order: the one list the metrics JSON line and the
// TensorBoard scalars are both written from.
std::vector<std::pair<const char*, double>> StepFields(const StepMetrics& m);

// The run layout's numbers by their metrics names (world_size, tensor, ...,
// virtual_stages): the first line's JSON and its TensorBoard scalars.
std::vector<std::pair<const char*, double>> RunFields(const RunLayout& r);

// One JSON line: "step", StepFields, and the run's layout on its first line.
std::string MetricsJson(const StepMetrics& m);

// "step 20/200 | loss 2.3456 (floor 1.2345) | lr 3.00e-04 | grad norm 0.812 | 12345 tok/s | 4.56
// GFLOP/s | ETA 1m23s"
std::string ProgressLine(const StepMetrics& m, int total_steps, double eta_s);

// Lines that record an event of the run rather than a step (a restart by
// tetra launch) start with this; they outlive a resume's rewrite of the file.
inline constexpr std::string_view kMetricsEventPrefix = "{\"event\": ";
inline bool IsMetricsEvent(std::string_view line) { return line.starts_with(kMetricsEventPrefix); }

// The step a line of the metrics file records; none for an event line or a
// line that is not a step's.
std::optional<int64_t> StepOfMetricsLine(const std::string& line);

class MetricsLog {
 public:
  // Starts `path` afresh (creating its directory), so one file is one run;
  // for a run resumed after step `resumed_step` > 0, keeps the file's lines
  // of steps 1..resumed_step and its events, and drops later steps (the run
  // will redo them).
  static absl::StatusOr<MetricsLog> Open(const std::string& path, int64_t resumed_step = 0);
  absl::Status Append(const StepMetrics& m);

 private:
  std::string path_;
  std::shared_ptr<FILE> file_;
};

}  // namespace tetra

#endif  // TETRA_OBSERVE_METRICS_LOG_H_
