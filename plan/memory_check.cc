#include "plan/memory_check.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/user_error.h"

#if TETRA_HAVE_CUDA
#include "core/cuda/device.h"
#endif

namespace tetra {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;

// "12.3 GiB", or "512.0 MiB" / "64.0 KiB" below that.
std::string Size(double bytes) {
  if (bytes >= kGiB) return absl::StrFormat("%.1f GiB", bytes / kGiB);
  if (bytes >= kMiB) return absl::StrFormat("%.1f MiB", bytes / kMiB);
  return absl::StrFormat("%.1f KiB", bytes / 1024);
}

// The first whitespace-separated word of the file at `path` as a number;
// nullopt when unreadable or not a number (cgroup v2 writes "max").
std::optional<double> ReadNumber(const std::string& path) {
  std::ifstream file(path);
  std::string word;
  int64_t value = 0;
  if (!(file >> word) || !absl::SimpleAtoi(word, &value)) return std::nullopt;
  return static_cast<double>(value);
}

// The value on the line "`key` value" of a memory.stat file, 0 without one.
double StatValue(const std::string& path, std::string_view key) {
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (words.size() == 2 && words[0] == key && absl::SimpleAtoi(words[1], &value)) return value;
  }
  return 0;
}

// MemAvailable in /proc/meminfo, in bytes.
std::optional<double> MemAvailable() {
  std::ifstream file("/proc/meminfo");
  for (std::string line; std::getline(file, line);) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = 0;
    if (words.size() >= 2 && words[0] == "MemAvailable:" && absl::SimpleAtoi(words[1], &kib))
      return kib * 1024.0;
  }
  return std::nullopt;
}

struct HostLimit {
  double bytes;
  std::string source;
};

// The least any memory cgroup holding this process leaves: limit - usage,
// plus the inactive page cache the kernel reclaims before it refuses memory,
// over the process's cgroup and its ancestors, for cgroup v2 and v1.
std::optional<HostLimit> CgroupAvailable() {
  struct Files {
    const char *root, *limit, *usage, *inactive;
  };
  constexpr Files kV2 = {"/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"};
  constexpr Files kV1 = {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                         "total_inactive_file"};
  std::optional<HostLimit> least;
  std::ifstream cgroups("/proc/self/cgroup");
  // Lines "id:controllers:path"; v2's is "0::path", v1's memory one names "memory".
  for (std::string line; std::getline(cgroups, line);) {
    const std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    const std::vector<std::string> controllers = absl::StrSplit(fields[1], ',');
    const Files* files = nullptr;
    if (fields[0] == "0" && fields[1].empty()) files = &kV2;
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end())
      files = &kV1;
    if (files == nullptr) continue;
    // From the process's cgroup "/a/b" up through "/a" to the root "".
    for (std::string relative = fields[2] == "/" ? "" : fields[2];;
         relative.resize(relative.rfind('/'))) {
      const std::string dir = files->root + relative;
      const std::optional<double> limit = ReadNumber(absl::StrCat(dir, "/", files->limit));
      const std::optional<double> usage = ReadNumber(absl::StrCat(dir, "/", files->usage));
      if (limit && usage) {
        const double left = std::max(
            0.0, *limit - *usage + StatValue(absl::StrCat(dir, "/memory.stat"), files->inactive));
        if (!least || left < least->bytes)
          least = HostLimit{left, absl::StrCat("the memory cgroup limit of ", dir)};
      }
      if (relative.empty() || relative[0] != '/') break;
    }
  }
  return least;
}

struct Part {
  const char* name;
  double bytes;
};

absl::Status Refuse(const char* subject, const std::vector<Part>& parts, int ranks,
                    const std::string& has, const std::string& hint) {
  double total = 0;
  std::vector<std::string> named;
  for (const Part& part : parts) {
    if (part.bytes <= 0) continue;
    total += part.bytes;
    named.push_back(absl::StrCat(part.name, " ", Size(part.bytes)));
  }
  return UserError(
      absl::StrCat(
          subject, " needs ", Size(total), " per rank (", absl::StrJoin(named, ", "), ")",
          ranks > 1 ? absl::StrCat(" for each of the ", ranks, " ranks on this machine") : "",
          " but ", has),
      hint);
}

// Bytes per element of each kind on a rank: fp32 master weights (+ the bf16
// compute copy), fp32 gradients, AdamW's two fp32 moments; an export holds
// fp32 weights alone.
ElementBytes RankElementBytes(const TrainerConfig& config, bool training, bool on_device) {
  // The GPU computes in bf16 unless told FP32 (AUTO is bf16 there); the CPU
  // in fp32 unless told BF16.
  const Precision::Value precision = config.train().precision();
  const bool bf16 =
      training && (precision == Precision::BF16 || (on_device && precision == Precision::AUTO));
  return training ? ElementBytes{.weight = bf16 ? 6.0 : 4.0,
                                 .grad = 4,
                                 .optimizer = 8,
                                 .activation = bf16 ? 2.0 : 4.0}
                  : ElementBytes{.weight = 4, .grad = 4, .optimizer = 0, .activation = 0};
}

// For synthetic tokens that do not fit.
constexpr char kDataHint[] =
    "lower data.synthetic.num_tokens (it needs only train.steps x global_batch_size x seq_length "
    "+ 1), or train fewer steps";

// For a model that does not fit: an export needs more memory; training
// splits what takes the most.
std::string ModelHint(bool training, const MemoryEstimate& model) {
  if (!training) {
    return "tetra export builds the whole model in one process: run it where there is more "
           "memory, or export a smaller model";
  }
  if (model.activations > model.weights + model.grads + model.optimizer) {
    return "shorten train.seq_length or train.micro_batch_size, split each sequence over more "
           "ranks (parallel.context), or split the layers over more ranks (parallel.pipeline, or "
           "parallel.tensor with sequence_parallel)";
  }
  return "split the model over more ranks (parallel.tensor, parallel.pipeline; "
         "optimizer.zero_stage 1 shards the AdamW moments over the data-parallel ranks), or use a "
         "smaller model";
}

}  // namespace

MachineMemory ReadMachineMemory(int host_ranks, bool gpu) {
  MachineMemory machine;
  machine.host_ranks = std::max(1, host_ranks);
  if (const std::optional<double> available = MemAvailable()) {
    machine.host_bytes = *available;
    machine.host_source = "MemAvailable in /proc/meminfo";
  }
  if (const std::optional<HostLimit> cgroup = CgroupAvailable();
      cgroup && (!machine.host_bytes || cgroup->bytes < *machine.host_bytes)) {
    machine.host_bytes = cgroup->bytes;
    machine.host_source = cgroup->source;
  }
#if TETRA_HAVE_CUDA
  if (gpu) {
    const cuda::DeviceMemory device = cuda::CurrentDeviceMemory();
    machine.device_bytes = static_cast<double>(device.free_bytes);
    machine.device_name =
        absl::StrFormat("GPU %d (%s)", cuda::CurrentDevice(), cuda::CurrentDeviceName());
    const int devices = std::max(1, cuda::DeviceCount());
    machine.device_ranks = (machine.host_ranks + devices - 1) / devices;
  }
#else
  (void)gpu;
#endif
  return machine;
}

absl::Status CheckRankMemory(const TrainerConfig& config, const PlanLayout& layout, MemoryUse use,
                             const MachineMemory& machine) {
  const bool training = use == MemoryUse::kTraining;
  const bool on_device = training && config.train().device() == Device::CUDA;
  MemoryEstimate model =
      EstimateMemory(config, layout, RankElementBytes(config, training, on_device));
  if (!training) model.activations = 0;  // the estimate's fp32 logits included
  // Every rank generates the whole synthetic stream, int32 tokens.
  const double data = training && config.data().format() == DataConfig::SYNTHETIC
                          ? 4.0 * static_cast<double>(config.data().synthetic().num_tokens())
                          : 0;
  const std::vector<Part> model_parts = {{"weights", model.weights},
                                         {"gradients", model.grads},
                                         {"AdamW moments", model.optimizer},
                                         {"activations", model.activations}};
  const Part data_part = {"synthetic tokens", data};
  const std::string model_hint = ModelHint(training, model);
  const std::string host_has = machine.host_bytes
                                   ? absl::StrCat("this machine has ", Size(*machine.host_bytes),
                                                  " available (", machine.host_source, ")")
                                   : "";
  const int ranks = machine.host_ranks;
  if (on_device) {
    if (machine.device_bytes && model.total() * machine.device_ranks > *machine.device_bytes) {
      return Refuse(
          "the model", model_parts, machine.device_ranks,
          absl::StrCat(machine.device_name, " has ", Size(*machine.device_bytes), " free"),
          model_hint);
    }
    if (machine.host_bytes && data * ranks > *machine.host_bytes) {
      return Refuse("the training data", {data_part}, ranks, host_has, kDataHint);
    }
    return absl::OkStatus();
  }
  if (machine.host_bytes && (model.total() + data) * ranks > *machine.host_bytes) {
    std::vector<Part> parts = model_parts;
    parts.push_back(data_part);
    return Refuse("the model", parts, ranks, host_has,
                  data > model.total() ? kDataHint : model_hint);
  }
  return absl::OkStatus();
}

}  // namespace tetra
