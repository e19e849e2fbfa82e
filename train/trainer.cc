#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/launcher.h"
#include "core/profiler.h"
#include "core/status_macros.h"
#include "core/timer.h"
#include "core/user_error.h"
#include "kernels/cpu/threads.h"
#include "model/llama_model.h"
#include "checkpoint/weights_io.h"
#include "parallel/gradient_reducer.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_partition.h"
#include "checkpoint/checkpoint_lock.h"
#include "checkpoint/checkpoint_resume.h"
#include "checkpoint/checkpoint_writer.h"
#include "train/config_validation.h"
#include "observe/flops.h"
#include "optimizer/lr_schedule.h"
#include "plan/memory_check.h"
#include "optimizer/model_optimizer.h"
#include "optimizer/moe_step.h"
#include "train/output_paths.h"
#include "observe/peak_flops.h"
#include "observe/step_timing.h"
#include "train/stop_request.h"
#include "observe/tensorboard_writer.h"
#include "observe/trace_writer.h"
#include "data/training_data.h"

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
  std::string line = absl::StrFormat("tetra: done: %d steps in %.1f s | loss %.4f (mean of the last %d steps)",
                                     steps.size(), seconds, mean, window);
  if (steps.back().loss_floor) {
    absl::StrAppendFormat(&line, ", %.4f nats above the data's floor %.4f", mean - *steps.back().loss_floor,
                          *steps.back().loss_floor);
  }
  return line;
}

// Mean token cross-entropy over the first `batches` global batches of the
// validation data (the same samples at every evaluation, so values compare),
// through the pipeline when there is one. Data-parallel rank r evaluates
// micro-batches r, r + dp, ... Collective over `dp` and `pp`.
absl::StatusOr<double> Evaluate(LlamaModel& model, PipelineExecutor* pipeline, Communicator& dp,
                                Communicator& pp, SampleSource& validation, int64_t batches,
                                int64_t global_batch,
                                int64_t micro, int64_t seq, std::vector<int32_t>& inputs,
                                std::vector<int32_t>& targets) {
  const int64_t samples = std::min(batches * global_batch, validation.samples_per_epoch()) / micro * micro;
  if (samples == 0) {
    return UserError(absl::StrCat("data.valid_path holds ", validation.samples_per_epoch(),
                                  " samples of ", seq, " tokens, fewer than one micro-batch of ", micro),
                     "use a larger validation set or a smaller train.micro_batch_size");
  }
  const int64_t micro_batches = samples / micro;
  // This rank's k-th micro-batch is micro-batch dp.rank() + k dp.size().
  const int64_t mine = (micro_batches - dp.rank() + dp.size() - 1) / dp.size();
  auto first_sample = [&](int64_t k) { return (dp.rank() + k * dp.size()) * micro; };
  double loss_sum = 0;
  if (pipeline) {
    absl::Status load_status;
    loss_sum = pipeline->EvaluateLoss(
        [&](int k, int32_t* in, int32_t* out) {
          if (load_status.ok()) load_status = validation.Load(first_sample(k), micro, in, out);
        },
        static_cast<int>(mine));
    RETURN_IF_ERROR(load_status);
  } else {
    for (int64_t k = 0; k < mine; ++k) {
      RETURN_IF_ERROR(validation.Load(first_sample(k), micro, inputs.data(), targets.data()));
      loss_sum += model.ForwardLoss(inputs.data(), targets.data(), micro, seq);
    }
  }
  // Only the last pipeline stage has a loss; the others contribute 0.
  return SumOverRanks(pp, SumOverRanks(dp, loss_sum)) / (samples * seq);
}

// With train.device CUDA (validated: built with CUDA, one rank): uses GPU
// `local_rank` and places the model there, in bf16 unless precision is FP32
// (AUTO is bf16 on the GPU). Returns the dense peak TFLOP/s for MFU:
// log.peak_tflops, else the device's from the table (0: unknown, no MFU).
absl::StatusOr<double> PlaceOnDevice(const TrainerConfig& config,
                                     std::optional<ScopedPlacement>* placement) {
  const double peak = config.log().peak_tflops();
  if (config.train().device() != Device::CUDA) return peak;
#if TETRA_HAVE_CUDA
  const int local_rank = LocalRank();
  std::string why;
  const int devices = cuda::DeviceCount(&why);
  if (local_rank >= devices) {
    return UserError(absl::StrFormat("train.device is CUDA, but this rank (local rank %d) sees %d "
                                     "GPUs%s", local_rank, devices, devices == 0 ? ": " + why : ""),
                     "run on a GPU machine (check nvidia-smi), or set train.device to CPU");
  }
  cuda::SetDevice(local_rank);
  const bool bf16 = config.train().precision() != Precision::FP32;
  placement->emplace(Placement{DeviceType::kCUDA, bf16 ? DType::kBF16 : DType::kF32});
  if (peak > 0) return peak;
  const PeakTflops table = DevicePeakTflops(cuda::CurrentDeviceName());
  return bf16 ? table.bf16 : table.fp32;
#else
  (void)placement;
  TETRA_CHECK(false) << "train.device CUDA in a build without CUDA (validation lets none through)";
  return peak;
#endif
}

// One optimizer step's work on this rank, beyond the loop's bookkeeping: the
// forward and backward of its micro-batches (through the pipeline when there
// is one) with the gradient reductions, and the weight update.
class StepRunner {
 public:
  StepRunner(const TrainerConfig& config, Distributed& dist, TrainingData& data, LlamaModel& model,
             ModelOptimizer& optimizer, PipelineExecutor* pipeline)
      : config_(config), dist_(dist), data_(data), model_(model), optimizer_(optimizer),
        pipeline_(pipeline), seq_(config.train().seq_length()), micro_(config.train().micro_batch_size()),
        global_batch_(config.train().global_batch_size()), rank_batch_(global_batch_ / dist.dp->size()),
        inputs_(micro_ * seq_), targets_(micro_ * seq_) {}

  int64_t tokens_per_step() const { return global_batch_ * seq_; }

  // Accumulates the gradient of the step's mean token loss and reduces it
  // over the data-parallel ranks; returns the mean loss.
  absl::StatusOr<double> ComputeGradients(int step) {
    model_.parameters().ZeroGrads();
    StartMoeStep(model_.moe_layers());
    const float grad_scale = 1.0f / static_cast<float>(tokens_per_step());
    // Data-parallel rank r takes samples r*B/dp .. (r+1)*B/dp - 1 of the step.
    const int64_t first_sample = (step - 1) * global_batch_ + dist_.dp->rank() * rank_batch_;
    // Gradient buckets start reducing during the last micro-batch's backward,
    // except those holding a tied embedding copy, which first sums with the
    // other stage's copy once the pipeline has drained.
    const Parameter* tied_copy = model_.tied_embedding_copy();
    const LlamaModel::GradientReadyCallback on_ready = [&](int64_t ready) {
      optimizer_.reducer().ReadyFrom(
          tied_copy ? std::max(ready, tied_copy->flat_offset + tied_copy->grad.numel()) : ready);
    };
    double loss_sum = 0;
    if (pipeline_) {
      absl::Status load_status;
      loss_sum = pipeline_->Step(
          [&](int m, int32_t* in, int32_t* out) {
            if (load_status.ok()) load_status = data_.loader->Load(first_sample + m * micro_, micro_, in, out);
          },
          grad_scale, on_ready);
      RETURN_IF_ERROR(load_status);
      if (tied_copy) {
        dist_.embd->AllReduce(tied_copy->grad.raw(), tied_copy->grad.raw(), tied_copy->grad.numel(),
                              DType::kF32, ReduceOp::kSum);
      }
    } else {
      for (int64_t first = 0; first < rank_batch_; first += micro_) {
        RETURN_IF_ERROR(data_.loader->Load(first_sample + first, micro_, inputs_.data(), targets_.data()));
        const bool last = first + micro_ == rank_batch_;
        {
          const ScopedSpan span(SpanKind::kForward, nullptr, first / micro_);
          loss_sum += model_.Forward(0, inputs_.data(), targets_.data(), micro_, seq_, grad_scale);
        }
        const ScopedSpan span(SpanKind::kBackward, nullptr, first / micro_);
        model_.Backward(0, last ? on_ready : nullptr);
      }
    }
    optimizer_.FinishReductions();
    // Only the last pipeline stage has a loss; the others contribute 0.
    return SumOverRanks(*dist_.pp, SumOverRanks(*dist_.dp, loss_sum)) / tokens_per_step();
  }

  // Fills m.grad_norm and m.lr and updates the weights (and the MoE biases,
  // with m's MoE fields); a non-finite loss or norm updates nothing.
  absl::Status UpdateWeights(int step, StepMetrics& m) {
    m.grad_norm = optimizer_.GradNorm();
    if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
      return UserError(
          absl::StrFormat("training diverged at step %d: loss %g, gradient norm %g (weights were "
                          "not updated)", step, m.loss, m.grad_norm),
          absl::StrFormat("lower optimizer.lr (now %g), add optimizer.warmup_steps, or keep "
                          "optimizer.clip_grad > 0", config_.optimizer().lr()),
          absl::StatusCode::kInternal);
    }
    m.lr = LearningRate(config_.optimizer(), step, config_.train().steps());
    optimizer_.ClipAndStep(m.grad_norm, m.lr, step);
    model_.parameters().RefreshCompute();
#if TETRA_HAVE_CUDA
    if (config_.train().device() == Device::CUDA) cuda::Synchronize();  // the step's kernels count in its time
#endif
    if (config_.model().moe().n_routed_experts() > 0) {  // every stage joins, MoE layers or not
      const MoeStepStats moe = FinishMoeStep(model_.moe_layers(), config_.model().moe().bias_update_speed(),
                                             global_batch_, *dist_.dp, *dist_.pp);
      m.aux_loss = moe.aux_loss;
      m.moe_load_imbalance = moe.load_imbalance;
      m.dropped_tokens = moe.dropped_tokens;
      if (dist_.world->size() > 1) m.all_to_all_bytes = moe.all_to_all_bytes;
    }
    return absl::OkStatus();
  }

  // The pipeline's waiting in the step just run (collective over the world).
  void AddBubble(StepMetrics& m) {
    if (pipeline_) {
      // Mean over ranks of the time each waited on its pipeline neighbours.
      m.bubble_fraction = SumOverRanks(*dist_.world, pipeline_->wait_seconds() / pipeline_->step_seconds()) /
                          dist_.world->size();
    }
  }

  absl::StatusOr<double> Evaluate(SampleSource& validation) {
    return tetra::Evaluate(model_, pipeline_, *dist_.dp, *dist_.pp, validation, config_.log().eval_batches(),
                           global_batch_, micro_, seq_, inputs_, targets_);
  }

 private:
  const TrainerConfig& config_;
  Distributed& dist_;
  TrainingData& data_;
  LlamaModel& model_;
  ModelOptimizer& optimizer_;
  PipelineExecutor* pipeline_;  // null without pipeline parallelism
  const int64_t seq_, micro_, global_batch_, rank_batch_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainerConfig& config, Distributed& dist,
                                  std::ostream& progress_stream) {
  const TrainConfig& train = config.train();
  cpu::SetCpuThreads(ResolveThreads(train));
  std::optional<ScopedPlacement> placement;  // the model's device and compute dtype
  ASSIGN_OR_RETURN(const double peak_tflops, PlaceOnDevice(config, &placement));
  // Before the data and the model take any memory; every rank stops if one must.
  const PlanLayout layout{.tp = dist.tp->size(), .pp = dist.pp->size(), .dp = dist.dp->size(),
                          .ep = dist.ep->size(), .zero_stage = config.optimizer().zero_stage()};
  const MachineMemory machine = ReadMachineMemory(RanksOnThisMachine(), train.device() == Device::CUDA);
  RETURN_IF_ERROR(AgreeOnStatus(*dist.world, CheckRankMemory(config, layout, MemoryUse::kTraining, machine)));
  // Progress and metrics come from one rank; the others compute the same numbers.
  std::ostream null_stream(nullptr);
  std::ostream& progress = dist.is_logging_rank() ? progress_stream : null_stream;
  // Before any work: this job alone saves to checkpoint.dir (held until
  // Train returns), and every place it writes can be written.
  ASSIGN_OR_RETURN(const std::optional<CheckpointLock> lock,
                   LockCheckpointDir(config.checkpoint().dir(), *dist.world, progress));
  RETURN_IF_ERROR(CheckOutputsWritable(config, *dist.world));
  ASSIGN_OR_RETURN(TrainingData data, OpenTrainingData(config));

  const int dp = dist.dp->size(), pp = dist.pp->size();
  ASSIGN_OR_RETURN(StagePartition partition, PartitionStages(config));
  LlamaModel model(config.model(), train.seed(),
                   {dist.tp.get(), config.parallel().sequence_parallel(),
                    /*flat_multiple=*/GradientReducer::PaddedSize(1, dp), partition.Chunks(dist.pp->rank()),
                    dist.ep.get(),
                    /*expert_flat_multiple=*/GradientReducer::PaddedSize(1, dist.edp->size())});
  ParameterStore& store = model.parameters();
  if (!config.init_from().empty()) RETURN_IF_ERROR(LoadWeights(config.init_from(), config.model(), store));
  ModelOptimizer optimizer(store, config, dist);
  std::optional<PipelineExecutor> pipeline;
  if (pp > 1) {
    ASSIGN_OR_RETURN(std::vector<Action> actions, MakeSchedule(config, dp, dist.pp->rank()));
    pipeline.emplace(model, *dist.pp, std::move(actions), train.micro_batch_size(), train.seq_length());
  }
  StepRunner runner(config, dist, data, model, optimizer, pipeline ? &*pipeline : nullptr);
  const double flops_per_step = TrainingFlopsPerToken(config.model(), train.seq_length()) * runner.tokens_per_step();
  // Each stage holds its own layers: the parameter count sums over the
  // pipeline, leaving out the last stage's copy of a tied embedding. Each
  // expert-parallel rank holds 1 / ep of the routed experts.
  const Parameter* tied_copy = model.tied_embedding_copy();
  const int64_t head_copy =
      tied_copy && !model.chunk(0).has_embedding ? tetra::NumElements(tied_copy->global_shape) : 0;
  const double num_parameters =
      SumOverRanks(*dist.pp, store.GlobalNumElements() - head_copy +
                                 (dist.ep->size() - 1) * store.ExpertGlobalNumElements());

  progress << absl::StrFormat(
      "tetra: %d-layer model, %.0f parameters | %d ranks (tensor %d x pipeline %d x data %d%s), %d threads each | "
      "data: %s | %d steps of %d tokens\n",
      config.model().num_hidden_layers(), num_parameters, dist.world->size(), dist.tp->size(), pp, dp,
      config.optimizer().zero_stage() == 1 ? ", ZeRO-1" : "", cpu::CpuThreads(), data.description,
      train.steps(), runner.tokens_per_step())
           << std::flush;
  for (const std::string& warning : ConfigWarnings(config)) progress << "tetra: warning: " << warning << "\n";

  ASSIGN_OR_RETURN(const int64_t resumed, ResumeFromCheckpoint(config, store, optimizer.dense(),
                                                               optimizer.experts(), dist, progress));
  std::optional<MetricsLog> metrics;
  std::optional<TensorBoardWriter> tensorboard;
  absl::Status opened = [&]() -> absl::Status {
    if (!dist.is_logging_rank()) return absl::OkStatus();
    if (!config.log().metrics_path().empty()) {
      ASSIGN_OR_RETURN(metrics, MetricsLog::Open(config.log().metrics_path(), resumed));
    }
    if (!config.log().tensorboard_dir().empty()) {
      ASSIGN_OR_RETURN(tensorboard, TensorBoardWriter::Open(config.log().tensorboard_dir()));
    }
    return absl::OkStatus();
  }();
  RETURN_IF_ERROR(AgreeOnStatus(*dist.world, std::move(opened)));
  std::optional<TraceWriter> trace;
  if (!config.log().trace_path().empty()) {
    ASSIGN_OR_RETURN(StepRange trace_steps, ParseTraceSteps(config.log().trace_steps(), train.steps()));
    trace.emplace(config.log().trace_path(), trace_steps);
  }
  std::optional<StopRequest> stop_request;  // with somewhere to save, a signal stops cleanly
  if (!config.checkpoint().dir().empty()) stop_request.emplace();

  // The buffers' sizes are fixed: their largest over ranks, once.
  StepMetrics memory;
  memory.param_bytes = MaxOverRanks(*dist.world, optimizer.param_bytes());
  memory.grad_bytes = MaxOverRanks(*dist.world, optimizer.grad_bytes());
  memory.optimizer_bytes = MaxOverRanks(*dist.world, optimizer.optimizer_bytes());
  TrainResult result;
  Timer run_timer;
  dist.world->Barrier();  // ranks' trace clocks start together
  Profiler::Get().ResetOrigin();
  // int64: a run of train.steps = INT_MAX steps ends without overflow.
  for (int64_t step = resumed + 1; step <= train.steps(); ++step) {
    Profiler::Get().BeginStep(/*record=*/trace && trace->Records(step));
    std::optional<ScopedSpan> step_span(std::in_place, SpanKind::kStep, nullptr, step);
    Timer step_timer;
    StepMetrics m;
    m.step = step;
    ASSIGN_OR_RETURN(m.loss, runner.ComputeGradients(step));
    {
      const ScopedSpan optimizer_span(SpanKind::kOptimizer);
      RETURN_IF_ERROR(runner.UpdateWeights(step, m));
    }
    m.step_time_s = step_timer.Seconds();
    step_span.reset();

    if (trace) RETURN_IF_ERROR(trace->EndStep(step, *dist.world, dist.coords));
    AddStepTiming(*dist.world, {dist.world->size(), dist.tp->size(), pp}, StepTiming::FromProfiler(), m);
    if (step == resumed + 1) {  // a report reads the run's layout from its first line
      m.run = RunLayout{dist.world->size(),         dist.tp->size(),          pp, dp,
                        config.parallel().expert(), train.global_batch_size(), train.micro_batch_size(),
                        train.seq_length(),         config.optimizer().zero_stage()};
    }
    m.tokens_per_s = runner.tokens_per_step() / m.step_time_s;
    m.tflops = flops_per_step / dist.world->size() / m.step_time_s / 1e12;
    if (peak_tflops > 0) m.mfu = m.tflops / peak_tflops;
    m.loss_floor = data.loss_floor;
    m.param_bytes = memory.param_bytes;
    m.grad_bytes = memory.grad_bytes;
    m.optimizer_bytes = memory.optimizer_bytes;
    runner.AddBubble(m);
    const int eval_interval = config.log().eval_interval();
    if (data.validation && ((eval_interval > 0 && step % eval_interval == 0) || step == train.steps())) {
      ASSIGN_OR_RETURN(m.val_loss, runner.Evaluate(*data.validation));
    }
    if (metrics) RETURN_IF_ERROR(metrics->Append(m));
    if (tensorboard) RETURN_IF_ERROR(tensorboard->Write(m));
    if (step % config.log().interval() == 0 || step == train.steps() || step == resumed + 1) {
      const double eta = run_timer.Seconds() / (step - resumed) * (train.steps() - step);
      progress << ProgressLine(m, train.steps(), eta) << "\n" << std::flush;
    }
    result.steps.push_back(m);

    const bool stop = stop_request && stop_request->Agreed(*dist.world);
    if (stop || CheckpointDue(config.checkpoint(), step, train.steps())) {
      ASSIGN_OR_RETURN(const std::string saved,
                       SaveCheckpoint(config, step, store, optimizer.dense(), optimizer.experts(), dist));
      progress << "tetra: checkpoint saved to " << saved << "\n" << std::flush;
    }
    if (stop) {
      progress << "tetra: stopped by " << stop_request->SignalName() << " after step " << step
               << "; resume by running the same command\n" << std::flush;
      return result;
    }
  }
  if (!result.steps.empty()) progress << RunSummary(result.steps, run_timer.Seconds()) << "\n";
  // The ranks of the first expert-parallel group (data-parallel rank 0 when ep
  // is 1) of every pipeline stage take part.
  if (!config.export_path().empty() && dist.coords.edp == 0) {
    RETURN_IF_ERROR(ExportWeights(config.export_path(), store, config.model(), train.seq_length(),
                                  DType::kF32, *dist.tp, dist.is_logging_rank(), dist.ep.get(),
                                  dist.pp.get()));
    progress << "tetra: weights exported to " << config.export_path() << "\n";
  }
  return result;
}

}  // namespace tetra
