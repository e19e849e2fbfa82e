#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_lock.h"
#include "checkpoint/checkpoint_resume.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/weights_io.h"
#include "comm/launcher.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/timer.h"
#include "data/training_data.h"
#include "kernels/cpu/threads.h"
#include "observe/flops.h"
#include "observe/peak_flops.h"
#include "observe/step_timing.h"
#include "observe/tensorboard_writer.h"
#include "observe/trace_writer.h"
#include "optimizer/model_optimizer.h"
#include "parallel/gradient_reducer.h"
#include "pipeline/executor.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "plan/memory_check.h"
#include "train/config_validation.h"
#include "train/output_paths.h"
#include "train/stop_request.h"
#include "train/train_step.h"

#if TETRA_HAVE_CUDA
#include "core/cuda/device.h"
#endif

namespace tetra {
namespace {

// train.threads, or else the cores this process may run on shared evenly by
// the ranks on this machine, so co-located ranks never oversubscribe the cores.
int ResolveThreads(const TrainConfig& train) {
  if (train.threads() > 0) return train.threads();
  const int cores = cpu::AffinityCores();
  // A rank bound to fewer cores than the node has already owns its share.
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return cores < online ? cores : std::max(1, cores / RanksOnThisMachine());
}

// "done: 3000 steps in 23.1 s | loss 1.1991 (mean of the last 100 steps), 0.0898 above the floor"
std::string RunSummary(const std::vector<StepMetrics>& steps, double seconds) {
  const size_t window = std::min<size_t>(100, steps.size());
  double mean = 0;
  for (size_t i = steps.size() - window; i < steps.size(); ++i) mean += steps[i].loss / window;
  std::string line =
      absl::StrFormat("tetra: done: %d steps in %.1f s | loss %.4f (mean of the last %d steps)",
                      steps.size(), seconds, mean, window);
  if (steps.back().loss_floor) {
    absl::StrAppendFormat(&line, ", %.4f nats above the data's floor %.4f",
                          mean - *steps.back().loss_floor, *steps.back().loss_floor);
  }
  return line;
}

// With train.device CUDA the model lives on the rank's GPU (made current by
// MakeTrainingWorld), in bf16 unless precision is FP32 (AUTO is bf16 on the
// GPU). On the CPU, precision BF16 computes in bf16 as the GPU does (AUTO is
// fp32 there). Returns the dense peak TFLOP/s for MFU: log.peak_tflops, else
// the device's from the table (0: unknown, no MFU).
double PlaceOnDevice(const TrainerConfig& config, std::optional<ScopedPlacement>* placement) {
  const double peak = config.log().peak_tflops();
  if (config.train().device() != Device::CUDA) {
    if (config.train().precision() == Precision::BF16) {
      placement->emplace(Placement{DeviceType::kCPU, DType::kBF16});
    }
    return peak;
  }
#if TETRA_HAVE_CUDA
  const bool bf16 = config.train().precision() != Precision::FP32;
  placement->emplace(Placement{DeviceType::kCUDA, bf16 ? DType::kBF16 : DType::kF32});
  if (peak > 0) return peak;
  const PeakTflops table = DevicePeakTflops(cuda::CurrentDeviceName());
  return bf16 ? table.bf16 : table.fp32;
#else
  TETRA_CHECK(false) << "train.device CUDA in a build without CUDA (validation lets none through)";
  return peak;
#endif
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainerConfig& config, const ParallelState& parallel,
                                  std::ostream& progress_stream) {
  const TrainConfig& train = config.train();
  const MeshShape& mesh = parallel.shape();
  cpu::SetCpuThreads(ResolveThreads(train));
  std::optional<ScopedPlacement> placement;  // the model's device and compute dtype
  const double peak_tflops = PlaceOnDevice(config, &placement);
  // Before the data and the model take any memory; every rank stops if one must.
  const PlanLayout layout{.mesh = mesh, .zero_stage = config.optimizer().zero_stage()};
  const MachineMemory machine =
      ReadMachineMemory(RanksOnThisMachine(), train.device() == Device::CUDA);
  RETURN_IF_ERROR(AgreeOnStatus(parallel.world(),
                                CheckRankMemory(config, layout, MemoryUse::kTraining, machine)));
  // Progress and metrics come from one rank; the others compute the same numbers.
  std::ostream null_stream(nullptr);
  std::ostream& progress = parallel.is_logging_rank() ? progress_stream : null_stream;
  // Before any work: this job alone saves to checkpoint.dir (held until
  // Train returns), and every place it writes can be written.
  ASSIGN_OR_RETURN(const std::optional<CheckpointLock> lock,
                   LockCheckpointDir(config.checkpoint().dir(), parallel.world(), progress));
  RETURN_IF_ERROR(CheckOutputsWritable(config, parallel.world()));
  ASSIGN_OR_RETURN(TrainingData data, OpenTrainingData(config));

  ASSIGN_OR_RETURN(StagePartition partition, PartitionStages(config));
  const int pipeline_rank = parallel.pipeline().rank();
  LanguageModel model(
      config.model(), train.seed(),
      {&parallel.tensor(), config.parallel().sequence_parallel(),
       /*flat_multiple=*/GradientReducer::PaddedSize(1, parallel.grad().size()),
       partition.Chunks(pipeline_rank), &parallel.expert(),
       /*expert_flat_multiple=*/GradientReducer::PaddedSize(1, parallel.expert_data().size()),
       &parallel.context()});
  model.set_mtp_loss_scaling_factor(train.mtp_loss_scaling_factor());
  if (train.recompute() == Recompute::FULL) model.set_full_recompute(train.recompute_layers());
  if (train.recompute() == Recompute::SELECTIVE) model.set_selective_recompute();
  ParameterStore& store = model.parameters();
  if (!config.init_from().empty())
    RETURN_IF_ERROR(LoadWeights(config.init_from(), config.model(), store));
  ModelOptimizer optimizer(model, config, parallel);
  ASSIGN_OR_RETURN(std::vector<Action> schedule,
                   MakeSchedule(config, parallel.batch().size(), pipeline_rank));
  // Under context parallelism each rank runs its chunks of every sequence.
  PipelineExecutor executor(model, parallel.pipeline(), std::move(schedule),
                            train.micro_batch_size(),
                            train.seq_length() / parallel.context().size());
  TrainStep train_step(config, parallel, *data.loader, model, optimizer, executor);
  const double flops_per_step =
      TrainingFlopsPerToken(config.model(), train.seq_length()) * train_step.tokens_per_step();
  // Each stage holds its own layers: the parameter count sums over the
  // pipeline, leaving out the last stage's copy of the embedding table. Each
  // expert-parallel rank holds 1 / ep of the routed experts.
  const Parameter* table_copy = model.embedding_copy();
  const int64_t copied = table_copy && !model.chunk(0).has_embedding
                             ? tetra::NumElements(table_copy->global_shape)
                             : 0;
  const double num_parameters =
      SumOverRanks(parallel.pipeline(), store.GlobalNumElements() - copied +
                                            (mesh.ep - 1) * store.ExpertGlobalNumElements());

  progress << absl::StrFormat(
                  "tetra: %d-layer model, %.0f parameters | %d ranks (tensor %d x context %d x "
                  "pipeline %d x data %d%s), %d threads "
                  "each | "
                  "data: %s | %d steps of %d tokens\n",
                  config.model().num_hidden_layers(), num_parameters, mesh.world, mesh.tp, mesh.cp,
                  mesh.pp, mesh.dp, config.optimizer().zero_stage() == 1 ? ", ZeRO-1" : "",
                  cpu::CpuThreads(), data.description, train.steps(), train_step.tokens_per_step())
           << std::flush;
  for (const std::string& warning : ConfigWarnings(config))
    progress << "tetra: warning: " << warning << "\n";

  ASSIGN_OR_RETURN(const int64_t resumed,
                   ResumeFromCheckpoint(config, store, optimizer.dense(), optimizer.experts(),
                                        parallel, progress));
  std::optional<MetricsLog> metrics;
  std::optional<TensorBoardWriter> tensorboard;
  absl::Status opened = [&]() -> absl::Status {
    if (!parallel.is_logging_rank()) return absl::OkStatus();
    if (!config.log().metrics_path().empty()) {
      ASSIGN_OR_RETURN(metrics, MetricsLog::Open(config.log().metrics_path(), resumed));
    }
    if (!config.log().tensorboard_dir().empty()) {
      ASSIGN_OR_RETURN(tensorboard, TensorBoardWriter::Open(config.log().tensorboard_dir()));
    }
    return absl::OkStatus();
  }();
  RETURN_IF_ERROR(AgreeOnStatus(parallel.world(), std::move(opened)));
  std::optional<TraceWriter> trace;
  if (!config.log().trace_path().empty()) {
    ASSIGN_OR_RETURN(StepRange trace_steps,
                     ParseTraceSteps(config.log().trace_steps(), train.steps()));
    trace.emplace(config.log().trace_path(), trace_steps);
  }
  std::optional<StopRequest> stop_request;  // with somewhere to save, a signal stops cleanly
  if (!config.checkpoint().dir().empty()) stop_request.emplace();

  // The buffers' sizes are fixed: their largest over ranks, once.
  StepMetrics memory;
  memory.param_bytes = MaxOverRanks(parallel.world(), optimizer.param_bytes());
  memory.grad_bytes = MaxOverRanks(parallel.world(), optimizer.grad_bytes());
  memory.optimizer_bytes = MaxOverRanks(parallel.world(), optimizer.optimizer_bytes());
  TrainResult result;
  Timer run_timer;
  parallel.world().Barrier();  // ranks' trace clocks start together
  Profiler::Get().ResetOrigin();
  // int64: a run of train.steps = INT_MAX steps ends without overflow.
  for (int64_t step = resumed + 1; step <= train.steps(); ++step) {
    Profiler::Get().BeginStep(/*record=*/trace && trace->Records(step));
    std::optional<ScopedSpan> step_span(std::in_place, SpanKind::kStep, nullptr, step);
    Timer step_timer;
    const int64_t mallocs_before = SynchronizingDeviceAllocations();
    StepMetrics m;
    m.step = step;
    RETURN_IF_ERROR(train_step.Run(step, m));
    m.step_time_s = step_timer.Seconds();
    step_span.reset();

    if (trace) RETURN_IF_ERROR(trace->EndStep(step, parallel.world(), parallel.coords()));
    StepTiming timing = StepTiming::FromProfiler();
    if (CurrentPlacement().device == DeviceType::kCUDA) {
      timing.device_mallocs = SynchronizingDeviceAllocations() - mallocs_before;
    }
    AddStepTiming(parallel.world(), mesh, timing, m);
    if (step == resumed + 1) {  // a report reads the run's layout from its first line
      m.run = RunLayout{mesh,
                        train.global_batch_size(),
                        train.micro_batch_size(),
                        train.seq_length(),
                        config.optimizer().zero_stage(),
                        config.parallel().schedule(),
                        config.parallel().virtual_stages()};
    }
    m.tokens_per_s = train_step.tokens_per_step() / m.step_time_s;
    m.tflops = flops_per_step / mesh.world / m.step_time_s / 1e12;
    if (peak_tflops > 0) m.mfu = m.tflops / peak_tflops;
    m.loss_floor = data.loss_floor;
    m.param_bytes = memory.param_bytes;
    m.grad_bytes = memory.grad_bytes;
    m.optimizer_bytes = memory.optimizer_bytes;
    train_step.AddBubble(m);
    const int eval_interval = config.log().eval_interval();
    if (data.validation &&
        ((eval_interval > 0 && step % eval_interval == 0) || step == train.steps())) {
      ASSIGN_OR_RETURN(m.val_loss, train_step.Evaluate(*data.validation));
    }
    if (metrics) RETURN_IF_ERROR(metrics->Append(m));
    if (tensorboard) RETURN_IF_ERROR(tensorboard->Write(m));
    if (step % config.log().interval() == 0 || step == train.steps() || step == resumed + 1) {
      const double eta = run_timer.Seconds() / (step - resumed) * (train.steps() - step);
      progress << ProgressLine(m, train.steps(), eta) << "\n" << std::flush;
    }
    result.steps.push_back(m);

    const bool stop = stop_request && stop_request->Agreed(parallel.world());
    if (stop || CheckpointDue(config.checkpoint(), step, train.steps())) {
      ASSIGN_OR_RETURN(
          const std::string saved,
          SaveCheckpoint(config, step, store, optimizer.dense(), optimizer.experts(), parallel));
      progress << "tetra: checkpoint saved to " << saved << "\n" << std::flush;
    }
    if (stop) {
      progress << "tetra: stopped by " << stop_request->SignalName() << " after step " << step
               << "; resume by running the same command\n"
               << std::flush;
      return result;
    }
  }
  if (!result.steps.empty()) progress << RunSummary(result.steps, run_timer.Seconds()) << "\n";
  // The ranks of the first expert-data-parallel replica (the first data-parallel
  // rank when ep is 1) of every pipeline stage take part.
  if (!config.export_path().empty() && parallel.expert_data().rank() == 0) {
    RETURN_IF_ERROR(ExportWeights(config.export_path(), store, config.model(), train.seq_length(),
                                  DType::kF32, parallel.tensor(), parallel.is_logging_rank(),
                                  &parallel.expert(), &parallel.pipeline(), config.init_from()));
    progress << "tetra: weights exported to " << config.export_path() << "\n";
  }
  return result;
}

}  // namespace tetra
