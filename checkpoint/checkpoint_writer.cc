#include "checkpoint/checkpoint_writer.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/checkpoint_format.h"
#include "core/logging.h"
#include "core/status_macros.h"

namespace tetra {
namespace {

// One rank's part of a checkpoint: its shard records and its data file's bytes.
struct RankShards {
  CheckpointManifest records;  // only `tensors`, each with this rank's shards
  std::string data;

  // `state` (fp32, elements [flat_begin, flat_begin + its size) of p's
  // slice) on either device: a GPU run's is staged through page-locked
  // memory. Only its part in the slice's real elements is saved (padding rows
  // of a padded vocabulary are not), nothing when that is empty. The CRCs
  // come later (SetShardCrcs), off the training thread when async.
  void Add(const Parameter& p, TensorRecord::Kind kind, const Tensor& state, int64_t flat_begin,
           const std::string& file, int rank) {
    TETRA_CHECK(state.dtype() == DType::kF32)
        << p.name << ": checkpoints save fp32 state, not " << DTypeName(state.dtype());
    const int64_t real = std::min(state.numel(), p.RealElements() - flat_begin);
    if (real <= 0) return;
    const Tensor values = OnHost(state.Reshape({state.numel()}).Slice(0, real));
    TensorRecord* tensor = records.add_tensors();
    tensor->set_name(p.name);
    tensor->set_kind(kind);
    for (int64_t extent : p.global_shape) tensor->add_shape(extent);
    ShardRecord* shard = tensor->add_shards();
    shard->set_file(file);
    shard->set_offset(data.size());
    shard->set_bytes(values.nbytes());
    for (const DimRange& range : ShardBox(p.global_shape, p.shard)) *shard->add_box() = range;
    shard->set_flat_begin(flat_begin);
    shard->set_flat_end(flat_begin + values.numel());
    shard->set_rank(rank);
    data.append(static_cast<const char*>(values.raw()), values.nbytes());
  }
};

// Each shard record's CRC-32C of itself and its bytes in `data`.
void SetShardCrcs(CheckpointManifest& records, const std::string& data) {
  for (TensorRecord& tensor : *records.mutable_tensors()) {
    for (ShardRecord& shard : *tensor.mutable_shards()) {
      shard.set_crc32c(ShardCrc32c(tensor, shard, data.data() + shard.offset()));
    }
  }
}

// The first tensor-parallel replica of a slice writes it; the others hold the
// same values. A tied embedding's copy on the last pipeline stage equals the
// first stage's: the first stage writes it.
bool FirstReplica(const Parameter& p, const ParallelState& parallel) {
  return parallel.tensor().rank() % p.shard.replicas == 0 &&
         (p.stage_copies == 1 || parallel.pipeline().rank() == 0);
}

// Adds the moments `optimizer` holds to `shards`: each piece is a flat range
// of one parameter's slice, named through the (dense or expert) flat buffer.
void AddMoments(const ParameterStore& store, const DistributedOptimizer& optimizer, bool expert,
                const ParallelState& parallel, const std::string& file, int rank,
                RankShards& shards) {
  for (const DistributedOptimizer::MomentView& view : optimizer.moments()) {
    // Pieces never cross segments: the piece's first element names its parameter.
    const Parameter& p = store.AtFlatOffset(view.range.begin, expert);
    const int64_t local_begin = view.range.begin - p.flat_offset;
    TETRA_CHECK(local_begin + view.range.size() <= p.value.numel())
        << "moment range [" << view.range.begin << ", " << view.range.end << ") leaves " << p.name;
    if (!FirstReplica(p, parallel)) continue;
    shards.Add(p, TensorRecord::EXP_AVG, view.exp_avg, local_begin, file, rank);
    shards.Add(p, TensorRecord::EXP_AVG_SQ, view.exp_avg_sq, local_begin, file, rank);
  }
}

RankShards CollectShards(const TrainerConfig& config, const ParameterStore& store,
                         const DistributedOptimizer& optimizer, const DistributedOptimizer* experts,
                         const ParallelState& parallel) {
  RankShards shards;
  // At most every local value and its two moments, in fp32: one allocation
  // instead of the string's doublings (the pages never written cost nothing).
  int64_t most = 0;
  for (const Parameter& p : store.all()) most += p.value.numel() * (p.trainable ? 3 : 1);
  shards.data.reserve(most * sizeof(float));
  const int rank = parallel.world().rank();
  const std::string file = RankFileName(rank);
  // Dense tensors: the first of their replicas (grad group rank 0) writes
  // them. Routed experts: the ranks of the first expert-data-parallel
  // replica, each its own experts.
  const bool first_dp = parallel.grad().rank() == 0, first_edp = parallel.expert_data().rank() == 0;
  for (const Parameter& p : store.all()) {
    if (!(p.expert ? first_edp : first_dp) || !FirstReplica(p, parallel)) continue;
    shards.Add(p, p.trainable ? TensorRecord::WEIGHT : TensorRecord::BUFFER, p.value, 0, file,
               rank);
  }
  // Under ZeRO-1 each rank of the group holds different moments; under ZeRO-0 all hold all.
  const bool zero1 = config.optimizer().zero_stage() == 1;
  if ((zero1 && parallel.grad().size() > 1) || first_dp) {
    AddMoments(store, optimizer, /*expert=*/false, parallel, file, rank, shards);
  }
  if (experts != nullptr && ((zero1 && parallel.expert_data().size() > 1) || first_edp)) {
    AddMoments(store, *experts, /*expert=*/true, parallel, file, rank, shards);
  }
  return shards;
}

CheckpointManifest BuildManifest(const TrainerConfig& config, int64_t step,
                                 const ParallelState& parallel,
                                 const std::vector<std::string>& rank_records) {
  CheckpointManifest manifest;
  manifest.set_format_version(kCheckpointFormatVersion);
  *manifest.mutable_config() = config;
  CheckpointLayout& layout = *manifest.mutable_layout();
  const MeshShape& mesh = parallel.shape();
  layout.set_tensor(mesh.tp);
  layout.set_pipeline(mesh.pp);
  layout.set_expert(mesh.ep);
  layout.set_data(mesh.dp);
  layout.set_virtual_stages(config.parallel().virtual_stages());
  layout.set_zero_stage(config.optimizer().zero_stage());
  layout.set_world(mesh.world);
  TrainingState& state = *manifest.mutable_state();
  state.set_step(step);
  state.set_consumed_samples(step * config.train().global_batch_size());
  state.set_seed(config.train().seed());
  state.set_global_batch_size(config.train().global_batch_size());
  // One record per (name, kind), in the order rank 0, 1, ... first names them.
  std::map<std::pair<std::string, int>, TensorRecord*> index;
  for (size_t r = 0; r < rank_records.size(); ++r) {
    manifest.add_files(RankFileName(static_cast<int>(r)));
    CheckpointManifest part;
    TETRA_CHECK(part.ParseFromString(rank_records[r]))
        << "rank " << r << "'s shard records do not parse";
    for (TensorRecord& tensor : *part.mutable_tensors()) {
      TensorRecord*& merged = index[{tensor.name(), tensor.kind()}];
      if (merged == nullptr) {
        merged = manifest.add_tensors();
        merged->set_name(tensor.name());
        merged->set_kind(tensor.kind());
        *merged->mutable_shape() = tensor.shape();
      }
      for (ShardRecord& shard : *tensor.mutable_shards()) *merged->add_shards() = std::move(shard);
    }
  }
  return manifest;
}

}  // namespace

absl::StatusOr<CheckpointSnapshot> SnapshotCheckpoint(const TrainerConfig& config, int64_t step,
                                                      const ParameterStore& store,
                                                      const DistributedOptimizer& optimizer,
                                                      const DistributedOptimizer* experts,
                                                      const ParallelState& parallel) {
  Communicator& world = parallel.world();
  const std::string& root = config.checkpoint().dir();
  absl::StatusOr<std::string> tmp_dir = TemporaryStepDir(root, step);
  if (world.rank() == 0) tmp_dir = CreateTemporaryStepDir(root, step);
  RETURN_IF_ERROR(AgreeOnStatus(world, tmp_dir.status()));
  CheckpointSnapshot snapshot =
      CollectCheckpointShards(config, step, store, optimizer, experts, parallel);
  snapshot.tmp_dir = *tmp_dir;
  snapshot.data_path = absl::StrCat(*tmp_dir, "/", RankFileName(world.rank()));
  return snapshot;
}

CheckpointSnapshot CollectCheckpointShards(const TrainerConfig& config, int64_t step,
                                           const ParameterStore& store,
                                           const DistributedOptimizer& optimizer,
                                           const DistributedOptimizer* experts,
                                           const ParallelState& parallel) {
  RankShards shards = CollectShards(config, store, optimizer, experts, parallel);
  CheckpointSnapshot snapshot;
  snapshot.step = step;
  snapshot.data = std::move(shards.data);
  snapshot.records = std::move(shards.records);
  return snapshot;
}

std::string GatherManifest(const TrainerConfig& config, const CheckpointSnapshot& snapshot,
                           const ParallelState& parallel) {
  const std::vector<std::string> records =
      AllGatherStrings(parallel.world(), snapshot.records.SerializeAsString());
  return BuildManifest(config, snapshot.step, parallel, records).SerializeAsString();
}

absl::Status WriteCheckpointData(CheckpointSnapshot& snapshot) {
  SetShardCrcs(snapshot.records, snapshot.data);
  const absl::Status written =
      WriteFileDurably(snapshot.data_path, snapshot.data.data(), snapshot.data.size());
  snapshot.data = std::string();
  return written;
}

absl::StatusOr<std::string> CommitCheckpoint(const TrainerConfig& config,
                                             const CheckpointSnapshot& snapshot,
                                             const ParallelState& parallel, absl::Status written) {
  Communicator& world = parallel.world();
  // Every rank's data file is on disk (fsynced) before rank 0 writes the manifest.
  RETURN_IF_ERROR(AgreeOnStatus(world, std::move(written)));
  const std::string manifest = GatherManifest(config, snapshot, parallel);
  const std::string& root = config.checkpoint().dir();
  const int64_t step = snapshot.step;
  absl::StatusOr<std::string> final_dir = StepDir(root, step);
  if (world.rank() == 0) {
    final_dir = [&]() -> absl::StatusOr<std::string> {
      RETURN_IF_ERROR(WriteFileDurably(absl::StrCat(snapshot.tmp_dir, "/", kManifestFileName),
                                       manifest.data(), manifest.size()));
      const std::string marker = CompleteMarkerText(step, manifest);
      RETURN_IF_ERROR(WriteFileDurably(absl::StrCat(snapshot.tmp_dir, "/", kCompleteMarkerName),
                                       marker.data(), marker.size()));
      ASSIGN_OR_RETURN(std::string committed, CommitStepDir(snapshot.tmp_dir, root, step));
      RETURN_IF_ERROR(RemoveOldCheckpoints(root, config.checkpoint().keep()));
      return committed;
    }();
  }
  RETURN_IF_ERROR(AgreeOnStatus(world, final_dir.status()));
  return final_dir;
}

absl::StatusOr<std::string> SaveCheckpoint(const TrainerConfig& config, int64_t step,
                                           const ParameterStore& store,
                                           const DistributedOptimizer& optimizer,
                                           const DistributedOptimizer* experts,
                                           const ParallelState& parallel) {
  ASSIGN_OR_RETURN(CheckpointSnapshot snapshot,
                   SnapshotCheckpoint(config, step, store, optimizer, experts, parallel));
  absl::Status written = WriteCheckpointData(snapshot);
  return CommitCheckpoint(config, snapshot, parallel, std::move(written));
}

}  // namespace tetra
