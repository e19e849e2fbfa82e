#include "train/training_run.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_resume.h"
#include "checkpoint/weights_io.h"
#include "comm/launcher.h"
#include "core/status_macros.h"
#include "kernels/cpu/threads.h"
#include "observe/flops.h"
#include "observe/peak_flops.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "plan/memory_check.h"
#include "train/config_validation.h"
#include "train/output_paths.h"

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

// Before the data and the model take any memory; every rank stops if one
// must. Then this job alone saves to checkpoint.dir (held until the run
// ends), and every place it writes can be written.
absl::Status ClaimResources(const TrainerConfig& config, const ParallelState& parallel,
                            std::ostream& progress, TrainingRun& run) {
  const PlanLayout layout = PlanLayout::Of(parallel.shape(), config);
  const MachineMemory machine =
      ReadMachineMemory(RanksOnThisMachine(), config.train().device() == Device::CUDA);
  RETURN_IF_ERROR(AgreeOnStatus(parallel.world(),
                                CheckRankMemory(config, layout, MemoryUse::kTraining, machine)));
  ASSIGN_OR_RETURN(run.lock,
                   LockCheckpointDir(config.checkpoint().dir(), parallel.world(), progress));
  return CheckOutputsWritable(config, parallel.world());
}

// This rank's chunks of the model, with their weights from init_from.
absl::StatusOr<std::unique_ptr<LanguageModel>> BuildModel(const TrainerConfig& config,
                                                          const ParallelState& parallel) {
  const TrainConfig& train = config.train();
  ASSIGN_OR_RETURN(StagePartition partition, PartitionStages(config));
  auto model = std::make_unique<LanguageModel>(
      config.model(), train.seed(),
      ModelParallelism::Of(parallel, config.parallel().sequence_parallel(),
                           partition.Chunks(parallel.pipeline().rank())));
  model->set_mtp_loss_scaling_factor(train.mtp_loss_scaling_factor());
  if (train.recompute() == Recompute::FULL) model->set_full_recompute(train.recompute_layers());
  if (train.recompute() == Recompute::SELECTIVE) model->set_selective_recompute();
  if (!config.init_from().empty()) {
    RETURN_IF_ERROR(LoadWeights(config.init_from(), config.model(), model->parameters()));
  }
  return model;
}

// Each stage holds its own layers: the parameter count sums over the
// pipeline, leaving out the last stage's copy of the embedding table. Each
// expert-parallel rank holds 1 / ep of the routed experts.
double CountParameters(LanguageModel& model, const ParallelState& parallel) {
  const ParameterStore& store = model.parameters();
  const Parameter* table_copy = model.embedding_copy();
  const int64_t copied = table_copy && !model.chunk(0).has_embedding
                             ? tetra::NumElements(table_copy->global_shape)
                             : 0;
  return SumOverRanks(parallel.pipeline(),
                      store.GlobalNumElements() - copied +
                          (parallel.shape().ep - 1) * store.ExpertGlobalNumElements());
}

void PrintBanner(const TrainerConfig& config, const TrainingRun& run, const MeshShape& mesh,
                 std::ostream& progress) {
  progress << absl::StrFormat(
                  "tetra: %d-layer model, %.0f parameters | %d ranks (tensor %d x context %d x "
                  "pipeline %d x data %d%s), %d threads each | data: %s | %d steps of %d tokens\n",
                  config.model().num_hidden_layers(), run.num_parameters, mesh.world, mesh.tp,
                  mesh.cp, mesh.pp, mesh.dp, config.optimizer().zero_stage() == 1 ? ", ZeRO-1" : "",
                  cpu::CpuThreads(), run.data.description, config.train().steps(),
                  run.step->tokens_per_step())
           << std::flush;
  for (const std::string& warning : ConfigWarnings(config)) {
    progress << "tetra: warning: " << warning << "\n";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingRun>> BuildTrainingRun(const TrainerConfig& config,
                                                              const ParallelState& parallel,
                                                              std::ostream& progress) {
  const TrainConfig& train = config.train();
  auto run = std::make_unique<TrainingRun>();
  cpu::SetCpuThreads(ResolveThreads(train));
  run->peak_tflops = PlaceOnDevice(config, &run->placement);
  RETURN_IF_ERROR(ClaimResources(config, parallel, progress, *run));
  ASSIGN_OR_RETURN(run->data, OpenTrainingData(config));
  ASSIGN_OR_RETURN(run->model, BuildModel(config, parallel));
  run->optimizer = std::make_unique<ModelOptimizer>(*run->model, config, parallel);
  ASSIGN_OR_RETURN(std::vector<Action> schedule,
                   MakeSchedule(config, parallel.batch().size(), parallel.pipeline().rank()));
  // Under context parallelism each rank runs its chunks of every sequence.
  run->executor = std::make_unique<PipelineExecutor>(
      *run->model, parallel.pipeline(), std::move(schedule), train.micro_batch_size(),
      train.seq_length() / parallel.context().size());
  run->step = std::make_unique<TrainStep>(config, parallel, *run->data.loader, *run->model,
                                          *run->optimizer, *run->executor);
  run->flops_per_step =
      TrainingFlopsPerToken(config.model(), train.seq_length()) * run->step->tokens_per_step();
  run->num_parameters = CountParameters(*run->model, parallel);
  PrintBanner(config, *run, parallel.shape(), progress);
  ASSIGN_OR_RETURN(run->resumed,
                   ResumeFromCheckpoint(config, run->model->parameters(), run->optimizer->dense(),
                                        run->optimizer->experts(), parallel, progress));
  return run;
}

}  // namespace tetra
