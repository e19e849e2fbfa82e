#include "checkpoint/checkpoint_resume.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/local_checkpoint.h"
#include "comm/host_names.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

constexpr char kSameModelHint[] =
    "resume with the model section of the run that wrote the checkpoint, or point "
    "checkpoint.dir elsewhere to start afresh";

absl::StatusOr<const TensorRecord*> FindMatching(const CheckpointReader& reader, const Parameter& p,
                                                 TensorRecord::Kind kind) {
  const TensorRecord* tensor = reader.Find(p.name, kind);
  const std::string manifest = absl::StrCat(reader.dir(), "/", kManifestFileName);
  if (tensor == nullptr) {
    return UserError(absl::StrCat("checkpoint manifest ", manifest, " has no ", KindName(kind),
                                  " tensor ", p.name,
                                  ", which the model has: it was written for "
                                  "another model"),
                     kSameModelHint);
  }
  const Shape shape(tensor->shape().begin(), tensor->shape().end());
  if (shape != p.global_shape) {
    return UserError(absl::StrCat("checkpoint manifest ", manifest, " has ", p.name, " (",
                                  KindName(kind), ") of shape ", ShapeString(shape),
                                  " but the model's is ", ShapeString(p.global_shape)),
                     kSameModelHint);
  }
  return tensor;
}

// `real`, the elements of p's slice a checkpoint holds (its ShardBox), as
// the whole slice, flat: zeros for its padding rows.
Tensor WithPadding(const Tensor& real, const Parameter& p) {
  const Tensor flat = real.Reshape({real.numel()});
  if (real.numel() == p.value.numel()) return flat;
  Tensor slice = Tensor::Zeros({p.value.numel()});
  slice.Slice(0, real.numel()).CopyFrom(flat);
  return slice;
}

// Loads the moments `optimizer` holds: its pieces are flat ranges of the
// (dense or expert) flat buffer, named through the parameters.
absl::Status RestoreMoments(const CheckpointReader& reader, const ParameterStore& store,
                            const DistributedOptimizer& optimizer, bool expert) {
  // Moment views ascend, so one parameter's pieces come together: read its
  // slice of m and v once for all of them.
  const Parameter* cached = nullptr;
  Tensor exp_avg, exp_avg_sq;
  for (const DistributedOptimizer::MomentView& view : optimizer.moments()) {
    const Parameter& p = store.AtFlatOffset(view.range.begin, expert);
    if (&p != cached) {
      const std::vector<DimRange> box = ShardBox(p.global_shape, p.shard);
      ASSIGN_OR_RETURN(const TensorRecord* m, FindMatching(reader, p, TensorRecord::EXP_AVG));
      ASSIGN_OR_RETURN(const TensorRecord* v, FindMatching(reader, p, TensorRecord::EXP_AVG_SQ));
      ASSIGN_OR_RETURN(exp_avg, reader.ReadBox(*m, box));
      ASSIGN_OR_RETURN(exp_avg_sq, reader.ReadBox(*v, box));
      exp_avg = WithPadding(exp_avg, p);  // pieces are flat ranges of the slice
      exp_avg_sq = WithPadding(exp_avg_sq, p);
      cached = &p;
    }
    const int64_t begin = view.range.begin - p.flat_offset, end = begin + view.range.size();
    view.exp_avg.CopyFrom(exp_avg.Slice(begin, end));
    view.exp_avg_sq.CopyFrom(exp_avg_sq.Slice(begin, end));
  }
  return absl::OkStatus();
}

// Loads `entry` on every rank and returns its step. Collective over the world.
absl::StatusOr<int64_t> RestoreFrom(const TrainerConfig& config, const CheckpointEntry& entry,
                                    ParameterStore& store, const DistributedOptimizer& optimizer,
                                    const DistributedOptimizer* experts,
                                    const ParallelState& parallel, std::ostream& progress) {
  // Each pipeline stage holds its own tensors, and each expert-parallel rank
  // its own routed experts: the model's count sums over both, a tied
  // embedding's two stage copies counting once.
  double stage_weights = 0, stage_experts = 0;
  for (const Parameter& p : store.all()) {
    (p.expert ? stage_experts : stage_weights) += 1.0 / p.stage_copies;
  }
  const int64_t model_weights = std::llround(SumOverRanks(
      parallel.pipeline(), stage_weights + SumOverRanks(parallel.expert(), stage_experts)));
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(entry.path));
    RETURN_IF_ERROR(CheckResumable(config, reader.manifest(), entry.step, entry.path));
    int64_t weights = 0;
    for (const TensorRecord& tensor : reader.manifest().tensors()) {
      weights += tensor.kind() == TensorRecord::WEIGHT || tensor.kind() == TensorRecord::BUFFER;
    }
    if (weights != model_weights) {
      return UserError(
          absl::StrCat("checkpoint manifest ", entry.path, "/", kManifestFileName, " holds ",
                       weights, " weight and buffer tensors but the model has ", model_weights,
                       ": it was written for another model"),
          kSameModelHint);
    }
    return RestoreCheckpoint(reader, store, optimizer, experts);
  }();
  RETURN_IF_ERROR(AgreeOnStatus(parallel.world(), std::move(status)));
  progress << "tetra: resumed from " << entry.path << " (step " << entry.step << ")\n"
           << std::flush;
  return entry.step;
}

}  // namespace

absl::Status RestoreCheckpoint(const CheckpointReader& reader, ParameterStore& store,
                               const DistributedOptimizer& optimizer,
                               const DistributedOptimizer* experts) {
  for (Parameter& p : store.all()) {
    const TensorRecord::Kind kind = p.trainable ? TensorRecord::WEIGHT : TensorRecord::BUFFER;
    ASSIGN_OR_RETURN(const TensorRecord* tensor, FindMatching(reader, p, kind));
    ASSIGN_OR_RETURN(Tensor slice, reader.ReadBox(*tensor, ShardBox(p.global_shape, p.shard)));
    p.value.CopyFrom(WithPadding(slice, p).Reshape(p.value.shape()));
  }
  store.RefreshCompute();  // a bf16 run computes with the copies of the restored weights
  RETURN_IF_ERROR(RestoreMoments(reader, store, optimizer, /*expert=*/false));
  if (experts != nullptr) RETURN_IF_ERROR(RestoreMoments(reader, store, *experts, /*expert=*/true));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ResumeFromCheckpoint(const TrainerConfig& config, ParameterStore& store,
                                             const DistributedOptimizer& optimizer,
                                             const DistributedOptimizer* experts,
                                             const ParallelState& parallel,
                                             std::ostream& progress) {
  const CheckpointConfig& checkpoint = config.checkpoint();
  if (checkpoint.dir().empty() || !checkpoint.resume()) return 0;
  absl::StatusOr<std::optional<CheckpointEntry>> found =
      NewestCompleteCheckpoint(checkpoint.dir(), progress);
  absl::Status usable = found.status();
  if (found.ok() && *found) usable = CheckResumeStep(config, (*found)->step, (*found)->path);
  RETURN_IF_ERROR(AgreeOnStatus(parallel.world(), std::move(usable)));
  const std::optional<CheckpointEntry>& entry = *found;
  // Every rank lists the same directory; agree anyway, so a rank that sees
  // another step (a file system not shared by all ranks) fails every rank.
  // Steps are at most train.steps, so exact as doubles.
  const int64_t step = entry ? entry->step : 0;
  if (MaxOverRanks(parallel.world(), static_cast<double>(step)) != step) {
    return AgreeOnStatus(
        parallel.world(),
        UserError(absl::StrCat("rank ", parallel.world().rank(), " finds checkpoint step ", step,
                               " in ", checkpoint.dir(), " but another rank finds a newer one"),
                  "checkpoint.dir must be one directory shared by every rank"));
  }
  std::optional<CheckpointEntry> source = entry;
  if (!checkpoint.local_dir().empty()) {
    // The copy in memory when it is at least as new: no shared file system to wait for.
    ASSIGN_OR_RETURN(std::optional<CheckpointEntry> local,
                     GatherLocalCheckpoint(checkpoint, step, parallel.world(),
                                           HostNames(parallel.world()), progress));
    if (local) {
      RETURN_IF_ERROR(
          AgreeOnStatus(parallel.world(), CheckResumeStep(config, local->step, local->path)));
      source = std::move(local);
    }
  }
  if (!source) return 0;
  return RestoreFrom(config, *source, store, optimizer, experts, parallel, progress);
}

}  // namespace tetra
