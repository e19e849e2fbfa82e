#include "train/run_reporter.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "comm/host_names.h"
#include "core/status_macros.h"
#include "observe/step_timing.h"

namespace tetra {

RunReporter::RunReporter(const TrainerConfig& config, const ParallelState& parallel,
                         const TrainingRun& run, std::ostream& progress)
    : config_(config),
      parallel_(parallel),
      run_(run),
      progress_(progress),
      straggler_(config.log().straggler_threshold(), config.log().straggler_steps()) {}

absl::Status RunReporter::OpenFiles() {
  const LogConfig& log = config_.log();
  if (!parallel_.is_logging_rank()) return absl::OkStatus();
  if (!log.metrics_path().empty()) {
    ASSIGN_OR_RETURN(metrics_, MetricsLog::Open(log.metrics_path(), run_.resumed));
  }
  if (!log.tensorboard_dir().empty()) {
    ASSIGN_OR_RETURN(tensorboard_, TensorBoardWriter::Open(log.tensorboard_dir()));
  }
  return absl::OkStatus();
}

absl::Status RunReporter::Start() {
  Communicator& world = parallel_.world();
  RETURN_IF_ERROR(AgreeOnStatus(world, OpenFiles()));
  const LogConfig& log = config_.log();
  if (!log.trace_path().empty()) {
    ASSIGN_OR_RETURN(StepRange trace_steps,
                     ParseTraceSteps(log.trace_steps(), config_.train().steps()));
    trace_.emplace(log.trace_path(), trace_steps);
  }
  const ModelOptimizer& optimizer = *run_.optimizer;
  memory_.param_bytes = MaxOverRanks(world, optimizer.param_bytes());
  memory_.grad_bytes = MaxOverRanks(world, optimizer.grad_bytes());
  memory_.optimizer_bytes = MaxOverRanks(world, optimizer.optimizer_bytes());
  hosts_ = HostNames(world);
  run_timer_.Reset();
  world.Barrier();  // ranks' trace clocks start together
  Profiler::Get().ResetOrigin();
  return absl::OkStatus();
}

void RunReporter::BeginStep(int64_t step) {
  Profiler::Get().BeginStep(/*record=*/trace_ && trace_->Records(step));
  step_span_.emplace(SpanKind::kStep, nullptr, step);
  step_timer_.Reset();
  mallocs_before_ = SynchronizingDeviceAllocations();
  work_before_ = DeviceWorkSoFar();
}

absl::Status RunReporter::EndStep(StepMetrics& m) {
  m.step_time_s = step_timer_.Seconds();
  step_span_.reset();
  const ParallelState& parallel = parallel_;
  const MeshShape& mesh = parallel.shape();
  if (trace_) RETURN_IF_ERROR(trace_->EndStep(m.step, parallel.world(), parallel.coords()));
  StepTiming timing = StepTiming::FromProfiler();
  if (CurrentPlacement().device == DeviceType::kCUDA) {
    timing.device_mallocs = SynchronizingDeviceAllocations() - mallocs_before_;
    const DeviceWorkCounts work = DeviceWorkSoFar() - work_before_;
    timing.device_launches = work.launches;
    timing.host_waits = work.host_waits;
    timing.device_allocations = work.allocations;
  }
  AddStepTiming(parallel.world(), mesh, timing, m);
  if (m.step == run_.resumed + 1) {  // a report reads the run's layout from its first line
    m.run = RunLayout::Of(mesh, config_);
  }
  m.tokens_per_s = run_.step->tokens_per_step() / m.step_time_s;
  m.tflops = run_.flops_per_step / mesh.world / m.step_time_s / 1e12;
  if (run_.peak_tflops > 0) m.mfu = m.tflops / run_.peak_tflops;
  m.loss_floor = run_.data.loss_floor;
  m.param_bytes = memory_.param_bytes;
  m.grad_bytes = memory_.grad_bytes;
  m.optimizer_bytes = memory_.optimizer_bytes;
  run_.step->AddBubble(m);
  return absl::OkStatus();
}

absl::Status RunReporter::Log(const StepMetrics& m) {
  if (metrics_) RETURN_IF_ERROR(metrics_->Append(m));
  if (tensorboard_) RETURN_IF_ERROR(tensorboard_->Write(m));
  const int64_t steps = config_.train().steps(), resumed = run_.resumed;
  if (m.step % config_.log().interval() == 0 || m.step == steps || m.step == resumed + 1) {
    const double eta = run_timer_.Seconds() / (m.step - resumed) * (steps - m.step);
    progress_ << ProgressLine(m, steps, eta) << "\n" << std::flush;
  }
  if (!m.slowest_rank) return absl::OkStatus();
  if (const std::optional<StragglerWarning> warning =
          straggler_.Observe({.slowest_rank = *m.slowest_rank, .ratio = *m.straggler_ratio})) {
    progress_ << StragglerMessage(*warning, hosts_[warning->rank]) << "\n" << std::flush;
  }
  return absl::OkStatus();
}

void RunReporter::Summary(const std::vector<StepMetrics>& steps) const {
  if (steps.empty()) return;
  const size_t window = std::min<size_t>(100, steps.size());
  double mean = 0;
  for (size_t i = steps.size() - window; i < steps.size(); ++i) mean += steps[i].loss / window;
  std::string line =
      absl::StrFormat("tetra: done: %d steps in %.1f s | loss %.4f (mean of the last %d steps)",
                      steps.size(), run_timer_.Seconds(), mean, window);
  if (steps.back().loss_floor) {
    absl::StrAppendFormat(&line, ", %.4f nats above the data's floor %.4f",
                          mean - *steps.back().loss_floor, *steps.back().loss_floor);
  }
  progress_ << line << "\n";
}

}  // namespace tetra
