#include "checkpoint/local_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_writer.h"
#include "core/crc32c.h"
#include "core/input_file.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

// The first rank on its host writes the host's manifest and marker.
bool FirstOnHost(const std::vector<std::string>& hosts, int rank) {
  return std::find(hosts.begin(), hosts.end(), hosts[rank]) - hosts.begin() == rank;
}

// A byte count travels as one F64 (exact below 2^53); -1 says the sender
// could not read what it was to send. Bytes travel as I32 words.
void SendLength(Communicator& world, double length, int to) {
  world.Send(Tensor::View(&length, {1}, DType::kF64), to);
}
double RecvLength(Communicator& world, int from) {
  double length = 0;
  world.Recv(Tensor::View(&length, {1}, DType::kF64), from);
  return length;
}
// `bytes` padded to whole words (the sender's copy is padded in place).
Tensor Words(std::string& bytes) {
  bytes.resize((bytes.size() + 3) / 4 * 4);
  return Tensor::View(bytes.data(), {static_cast<int64_t>(bytes.size() / 4)}, DType::kI32);
}

void SendBytes(Communicator& world, std::string bytes, int to) {
  const size_t length = bytes.size();
  SendLength(world, static_cast<double>(length), to);
  if (length > 0) world.Send(Words(bytes), to);
}
std::string RecvBytes(Communicator& world, double length, int from) {
  std::string bytes(static_cast<size_t>(length), '\0');
  if (length > 0) {
    world.Recv(Words(bytes), from);
    bytes.resize(static_cast<size_t>(length));
  }
  return bytes;
}

// Sends this rank's data file (`data`) to its backup and returns the data
// files of the ranks it backs up, by rank: one all-to-all-v over the world
// (sizes gathered first), so it keeps NCCL's rules on every backend.
std::vector<std::pair<int, std::string>> ExchangeBackups(Communicator& world,
                                                         const std::vector<int>& backup,
                                                         std::string& data) {
  const int n = world.size(), rank = world.rank();
  double mine = static_cast<double>(data.size());
  std::vector<double> sizes(n);
  world.AllGather(Tensor::View(&mine, {1}, DType::kF64),
                  Tensor::View(sizes.data(), {n}, DType::kF64));
  // Data files hold fp32 values: whole words, which Words leaves as they are.
  TETRA_CHECK(data.size() % 4 == 0) << "a data file of " << data.size() << " bytes";
  std::vector<int64_t> send_counts(n, 0), send_offsets(n, 0), recv_counts(n, 0), recv_offsets(n, 0);
  if (backup[rank] >= 0) send_counts[backup[rank]] = static_cast<int64_t>(data.size() / 4);
  std::vector<std::pair<int, std::string>> kept;
  int64_t words = 0;
  for (int r = 0; r < n; ++r) {
    if (backup[r] != rank) continue;
    recv_offsets[r] = words;
    recv_counts[r] = static_cast<int64_t>(sizes[r]) / 4;
    words += recv_counts[r];
    kept.emplace_back(r, std::string());
  }
  std::vector<int32_t> received(std::max<int64_t>(words, 1));  // never a null buffer
  world.AllToAllV(Words(data), send_counts, send_offsets,
                  Tensor::View(received.data(), {words}, DType::kI32), recv_counts, recv_offsets);
  for (auto& [from, bytes] : kept) {
    bytes.assign(reinterpret_cast<const char*>(received.data() + recv_offsets[from]),
                 recv_counts[from] * 4);
  }
  return kept;
}

// Writes the manifest and marker into `tmp_dir`, commits it as the host's
// copy of `step`, and removes the host's other copies.
absl::Status CommitLocalCopy(const std::string& host_dir, const std::string& tmp_dir, int64_t step,
                             const std::string& manifest) {
  RETURN_IF_ERROR(WriteFileDurably(absl::StrCat(tmp_dir, "/", kManifestFileName), manifest.data(),
                                   manifest.size()));
  const std::string marker = CompleteMarkerText(step, manifest);
  RETURN_IF_ERROR(WriteFileDurably(absl::StrCat(tmp_dir, "/", kCompleteMarkerName), marker.data(),
                                   marker.size()));
  RETURN_IF_ERROR(CommitStepDir(tmp_dir, host_dir, step).status());
  ASSIGN_OR_RETURN(const std::vector<CheckpointEntry> entries, ListCheckpoints(host_dir));
  for (const CheckpointEntry& entry : entries) {
    std::error_code error;
    if (entry.step != step) fs::remove_all(entry.path, error);
  }
  return RemoveOldCheckpoints(host_dir, 1);  // and the .tmp leftovers of crashed copies
}

// What one host holds of its newest complete copy: its step (0: none), the
// data files its manifest names, and those present.
struct HostCopy {
  int64_t step = 0;
  std::vector<std::string> files, present;

  std::string Serialize() const {
    return absl::StrCat(step, "\n", absl::StrJoin(files, " "), "\n", absl::StrJoin(present, " "));
  }
  static HostCopy Parse(const std::string& text) {
    const std::vector<std::string> lines = absl::StrSplit(text, '\n');
    HostCopy copy;
    if (lines.size() != 3 || !absl::SimpleAtoi(lines[0], &copy.step)) return {};
    copy.files = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
    copy.present = absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
    return copy;
  }
  bool Has(const std::string& file) const {
    return file == kManifestFileName || file == kCompleteMarkerName ||
           std::find(present.begin(), present.end(), file) != present.end();
  }
};

// A damaged or unreadable copy is no copy: checkpoint.dir still has its saves.
HostCopy FindHostCopy(const std::string& host_dir) {
  std::ostringstream passed_over;
  const absl::StatusOr<std::optional<CheckpointEntry>> newest =
      NewestCompleteCheckpoint(host_dir, passed_over);
  if (!newest.ok() || !*newest) return {};
  const absl::StatusOr<CheckpointManifest> manifest = ReadManifest((*newest)->path);
  if (!manifest.ok()) return {};
  HostCopy copy;
  copy.step = (*newest)->step;
  for (const std::string& file : manifest->files()) {
    copy.files.push_back(file);
    std::error_code error;
    if (fs::is_regular_file(absl::StrCat((*newest)->path, "/", file), error)) {
      copy.present.push_back(file);
    }
  }
  return copy;
}

// The newest step of at least `min_step` whose copies hold every data file between them.
std::optional<int64_t> NewestWholeStep(const std::vector<HostCopy>& copies, int64_t min_step) {
  std::set<int64_t, std::greater<>> steps;
  for (const HostCopy& copy : copies) {
    if (copy.step >= std::max<int64_t>(min_step, 1)) steps.insert(copy.step);
  }
  for (int64_t step : steps) {
    const std::vector<std::string>* files = nullptr;
    std::set<std::string> held;
    for (const HostCopy& copy : copies) {
      if (copy.step != step) continue;
      if (files == nullptr) files = &copy.files;
      held.insert(copy.present.begin(), copy.present.end());
    }
    if (std::all_of(files->begin(), files->end(),
                    [&](const std::string& file) { return held.count(file) > 0; })) {
      return step;
    }
  }
  return std::nullopt;
}

struct Transfer {
  int from, to;
  std::string file;
};

// The files each host's first rank lacks of `step`'s copy, each from the
// first rank whose host has it: the data files, then the manifest, the
// marker last (a host's copy is complete once the marker is there).
std::vector<Transfer> PlanFillIn(const std::vector<HostCopy>& copies,
                                 const std::vector<std::string>& hosts, int64_t step) {
  std::vector<std::string> files;
  for (const HostCopy& copy : copies) {
    if (copy.step == step && files.empty()) files = copy.files;
  }
  files.insert(files.end(), {kManifestFileName, kCompleteMarkerName});
  std::vector<Transfer> plan;
  for (int to = 0; to < static_cast<int>(hosts.size()); ++to) {
    if (!FirstOnHost(hosts, to)) continue;
    for (const std::string& file : files) {
      if (copies[to].step == step && copies[to].Has(file)) continue;
      for (int from = 0; from < static_cast<int>(copies.size()); ++from) {
        if (copies[from].step == step && copies[from].Has(file)) {
          plan.push_back({from, to, file});
          break;
        }
      }
    }
  }
  return plan;
}

// Runs `plan` (the same on every rank, in the same order, so every pair's
// messages meet). A sender that cannot read its file says so instead of
// sending it, and the receiver fails; nothing waits for a message never sent.
absl::Status FillIn(Communicator& world, const std::vector<Transfer>& plan,
                    const std::string& step_dir) {
  absl::Status status;
  for (const Transfer& transfer : plan) {
    const std::string path = absl::StrCat(step_dir, "/", transfer.file);
    if (world.rank() == transfer.from) {
      absl::StatusOr<std::string> bytes =
          ReadInputFile(path, "a copy in checkpoint.local_dir",
                        "remove checkpoint.local_dir's copies to resume from checkpoint.dir");
      if (bytes.ok()) {
        SendBytes(world, *std::move(bytes), transfer.to);
      } else {
        SendLength(world, -1, transfer.to);
        status.Update(bytes.status());
      }
    } else if (world.rank() == transfer.to) {
      const double length = RecvLength(world, transfer.from);
      if (length < 0) {
        status.Update(UserError(absl::StrCat("rank ", transfer.from, " could not send ",
                                             transfer.file, " of its copy in memory"),
                                "see its error; checkpoint.dir still has its saves"));
        continue;
      }
      const std::string bytes = RecvBytes(world, length, transfer.from);
      std::error_code error;
      fs::create_directories(step_dir, error);
      if (status.ok()) status = WriteFileDurably(path, bytes.data(), bytes.size());
    }
  }
  return status;
}

}  // namespace

std::vector<int> BackupRanks(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;  // hosts by first rank
  for (const std::string& host : hosts) {
    if (std::find(order.begin(), order.end(), host) == order.end()) order.push_back(host);
  }
  std::vector<int> backup(hosts.size(), -1);
  if (order.size() < 2) return backup;
  std::vector<std::vector<int>> ranks(order.size());
  std::vector<int> place(hosts.size());  // each rank's place among its host's ranks
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    std::vector<int>& on_host =
        ranks[std::find(order.begin(), order.end(), hosts[r]) - order.begin()];
    place[r] = static_cast<int>(on_host.size());
    on_host.push_back(r);
  }
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    const size_t h = std::find(order.begin(), order.end(), hosts[r]) - order.begin();
    const std::vector<int>& next = ranks[(h + 1) % order.size()];
    backup[r] = next[place[r] % next.size()];
  }
  return backup;
}

std::string LocalCopyDir(const CheckpointConfig& checkpoint, const std::string& host) {
  std::error_code error;
  const std::string run = fs::absolute(checkpoint.dir(), error).lexically_normal().string();
  return absl::StrCat(checkpoint.local_dir(), "/", host, "/run-",
                      absl::Hex(Crc32c(run.data(), run.size()), absl::kZeroPad8));
}

std::optional<int64_t> NewestLocalStep(const CheckpointConfig& checkpoint,
                                       const std::string& host) {
  const HostCopy copy = FindHostCopy(LocalCopyDir(checkpoint, host));
  if (copy.step == 0) return std::nullopt;
  return copy.step;
}

absl::Status SaveLocalCheckpoint(const TrainerConfig& config, int64_t step,
                                 const ParameterStore& store, const DistributedOptimizer& optimizer,
                                 const DistributedOptimizer* experts, const ParallelState& parallel,
                                 const std::vector<std::string>& hosts) {
  Communicator& world = parallel.world();
  const int rank = world.rank();
  const std::string host_dir = LocalCopyDir(config.checkpoint(), hosts[rank]);
  const bool first_on_host = FirstOnHost(hosts, rank);
  absl::StatusOr<std::string> tmp_dir = TemporaryStepDir(host_dir, step);
  if (first_on_host) tmp_dir = CreateTemporaryStepDir(host_dir, step);
  RETURN_IF_ERROR(AgreeOnStatus(world, tmp_dir.status()));
  CheckpointSnapshot snapshot =
      CollectCheckpointShards(config, step, store, optimizer, experts, parallel);
  const std::vector<std::pair<int, std::string>> kept =
      ExchangeBackups(world, BackupRanks(hosts), snapshot.data);
  snapshot.data_path = absl::StrCat(*tmp_dir, "/", RankFileName(rank));
  absl::Status written = WriteCheckpointData(snapshot);
  for (const auto& [from, data] : kept) {
    if (!written.ok()) break;
    written =
        WriteFileDurably(absl::StrCat(*tmp_dir, "/", RankFileName(from)), data.data(), data.size());
  }
  RETURN_IF_ERROR(AgreeOnStatus(world, std::move(written)));
  const std::string manifest = GatherManifest(config, snapshot, parallel);
  absl::Status committed;
  if (first_on_host) committed = CommitLocalCopy(host_dir, *tmp_dir, step, manifest);
  return AgreeOnStatus(world, std::move(committed));
}

absl::StatusOr<std::optional<CheckpointEntry>> GatherLocalCheckpoint(
    const CheckpointConfig& checkpoint, int64_t min_step, Communicator& world,
    const std::vector<std::string>& hosts, std::ostream& progress) {
  const std::string host_dir = LocalCopyDir(checkpoint, hosts[world.rank()]);
  std::vector<HostCopy> copies;
  for (const std::string& report : AllGatherStrings(world, FindHostCopy(host_dir).Serialize())) {
    copies.push_back(HostCopy::Parse(report));
  }
  const std::optional<int64_t> step = NewestWholeStep(copies, min_step);
  if (!step) return std::nullopt;
  const std::string step_dir = StepDir(host_dir, *step);
  const std::vector<Transfer> plan = PlanFillIn(copies, hosts, *step);
  RETURN_IF_ERROR(AgreeOnStatus(world, FillIn(world, plan, step_dir)));
  if (!plan.empty()) {
    std::set<std::string> receivers;
    for (const Transfer& transfer : plan) receivers.insert(hosts[transfer.to]);
    progress << "tetra: " << plan.size() << " files of the copy in memory of step " << *step
             << " sent to host" << (receivers.size() > 1 ? "s " : " ")
             << absl::StrJoin(receivers, ", ") << ", which lacked them\n";
  }
  return CheckpointEntry{.step = *step, .path = step_dir, .complete = true};
}

absl::Status RemoveLocalCheckpoints(const CheckpointConfig& checkpoint, Communicator& world,
                                    const std::vector<std::string>& hosts) {
  absl::Status status;
  if (FirstOnHost(hosts, world.rank())) {
    const std::string dir = LocalCopyDir(checkpoint, hosts[world.rank()]);
    std::error_code error;
    fs::remove_all(dir, error);
    if (error) {
      status = UserError(
          absl::StrCat("cannot remove the copies in memory at ", dir, ": ", error.message()),
          "remove them by hand: they hold memory until then");
    }
  }
  return AgreeOnStatus(world, std::move(status));
}

}  // namespace tetra
