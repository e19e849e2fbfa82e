#include "tools/commbench_command.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/communicator.h"
#include "comm/launcher.h"
#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/timer.h"
#include "core/user_error.h"
#include "tools/command_line.h"
#ifdef TETRA_HAVE_CUDA
#include <cuda_runtime.h>

#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/nccl_library.h"
#endif

namespace tetra {
namespace {

enum class BenchOp { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast, kSendRecv };
constexpr BenchOp kAllOps[] = {BenchOp::kAllReduce, BenchOp::kReduceScatter, BenchOp::kAllGather,
                               BenchOp::kAllToAll,  BenchOp::kBroadcast,     BenchOp::kSendRecv};

const char* OpName(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce:
      return "all_reduce";
    case BenchOp::kReduceScatter:
      return "reduce_scatter";
    case BenchOp::kAllGather:
      return "all_gather";
    case BenchOp::kAllToAll:
      return "all_to_all";
    case BenchOp::kBroadcast:
      return "broadcast";
    case BenchOp::kSendRecv:
      return "send_recv";
  }
  return "?";
}

// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md there): the fraction
// of the data each rank must move over its link for the operation, so busbw
// is comparable to link speed whatever the rank count.
double BusFactor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::kAllReduce:
      return 2.0 * (n - 1) / n;
    case BenchOp::kReduceScatter:
    case BenchOp::kAllGather:
    case BenchOp::kAllToAll:
      return static_cast<double>(n - 1) / n;
    case BenchOp::kBroadcast:
    case BenchOp::kSendRecv:
      return 1;
  }
  return 1;
}

struct Options {
  std::vector<BenchOp> ops;
  std::string group = "world";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t factor = 2;
  int64_t iters = 20;
  int64_t warmup = 5;
  DeviceType device = DeviceType::kCPU;
  double timeout_s = 60;
};

// "8", "512K", "64M", "1G" (binary multiples, as nccl-tests reads them).
absl::StatusOr<int64_t> ParseBytes(const std::string& flag, const std::string& text) {
  std::string digits = text;
  int shift = 0;
  if (!digits.empty()) {
    switch (absl::ascii_toupper(digits.back())) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
    }
    if (shift > 0) digits.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value <= 0 || value > (int64_t{1} << (40 - shift))) {
    return UserError(absl::StrCat("tetra commbench: --", flag, " ", text, " is not a byte count"),
                     absl::StrCat("write e.g. --", flag, " 8, 512K, 64M or 1G"));
  }
  return value << shift;
}

absl::StatusOr<int64_t> ParsePositive(const std::string& flag, const std::string& text,
                                      int64_t min) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min) {
    return UserError(
        absl::StrCat("tetra commbench: --", flag, " ", text, " is not an integer >= ", min),
        absl::StrCat("e.g. --", flag, " ", std::max<int64_t>(min, 2)));
  }
  return value;
}

absl::StatusOr<Options> ParseOptions(int argc, char** argv) {
  ASSIGN_OR_RETURN(ParsedFlags flags, ParseFlags(argc, argv, 2, "commbench",
                                                 {"op", "group", "min-bytes", "max-bytes", "factor",
                                                  "iters", "warmup", "device", "timeout"}));
  Options options;
  auto value = [&](const std::string& name, const std::string& fallback) {
    return flags.values.count(name) ? flags.values.at(name) : fallback;
  };
  const std::string op = value("op", "all_reduce");
  for (BenchOp candidate : kAllOps) {
    if (op == "all" || op == OpName(candidate)) options.ops.push_back(candidate);
  }
  if (options.ops.empty()) {
    return UserError(
        absl::StrCat("tetra commbench: --op ", op, " is not an operation"),
        "use all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send_recv or all");
  }
  options.group = value("group", "world");
  if (options.group != "world" && options.group != "even_odd" && options.group != "pairs") {
    return UserError(
        absl::StrCat("tetra commbench: --group ", options.group, " is not a group layout"),
        "use world, even_odd (two groups by rank parity) or pairs (ranks 2k and 2k+1)");
  }
  ASSIGN_OR_RETURN(options.min_bytes, ParseBytes("min-bytes", value("min-bytes", "8")));
  ASSIGN_OR_RETURN(options.max_bytes, ParseBytes("max-bytes", value("max-bytes", "64M")));
  ASSIGN_OR_RETURN(options.factor, ParsePositive("factor", value("factor", "2"), 2));
  ASSIGN_OR_RETURN(options.iters, ParsePositive("iters", value("iters", "20"), 1));
  ASSIGN_OR_RETURN(options.warmup, ParsePositive("warmup", value("warmup", "5"), 0));
  ASSIGN_OR_RETURN(const int64_t timeout, ParsePositive("timeout", value("timeout", "60"), 1));
  options.timeout_s = static_cast<double>(timeout);
  if (options.min_bytes > options.max_bytes) {
    return UserError(absl::StrCat("tetra commbench: --min-bytes ", options.min_bytes,
                                  " is above --max-bytes ", options.max_bytes),
                     "make --min-bytes at most --max-bytes");
  }
  const std::string device = value("device", "cpu");
  if (device == "cuda") {
    options.device = DeviceType::kCUDA;
  } else if (device != "cpu") {
    return UserError(absl::StrCat("tetra commbench: --device ", device, " is not cpu or cuda"),
                     "use --device cpu (MPI over host memory) or --device cuda (NCCL)");
  }
  return options;
}

// The world ranks of this rank's group under the --group layout.
absl::StatusOr<std::vector<int>> GroupRanks(const std::string& layout, int me, int world_size) {
  if (layout != "world" && world_size % 2 != 0) {
    return UserError(absl::StrCat("tetra commbench: --group ", layout,
                                  " needs an even number of ranks, got ", world_size),
                     "launch an even number of ranks or use --group world");
  }
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) {
    if (layout == "world" || (layout == "even_odd" && r % 2 == me % 2) ||
        (layout == "pairs" && r / 2 == me / 2)) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

// `values` in a new F32 tensor on `device`.
Tensor Upload(const std::vector<float>& values, DeviceType device) {
  Tensor host = Tensor::Empty({static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), host.f32());
  if (device == DeviceType::kCPU) return host;
  Tensor on_device = Tensor::Empty(host.shape(), DType::kF32, device);
  on_device.CopyFrom(host);
  return on_device;
}

std::vector<float> Download(const Tensor& t) {
  std::vector<float> values(t.numel());
  Tensor::View(values.data(), t.shape(), DType::kF32).CopyFrom(t);
  return values;
}

// Inputs are small integers, so every sum is exact and the check is exact.
float Value(int rank, int64_t i) { return static_cast<float>((i * 7 + rank * 13) % 31 - 15); }
float Element(int src, int dst, int64_t j) {
  return static_cast<float>((src * 31 + dst * 7 + j * 3) % 61 - 30);
}

// Starts one run of an operation.
using CaseStart = std::function<CommHandle(const Tensor& send, const Tensor& recv)>;

// One operation at one size on this rank: the inputs, what recv must hold
// after one run, and how to start it. `bytes` and `count` are nccl-tests'
// "size" and "count": the larger of the two buffers.
struct Case {
  int64_t bytes = 0;
  int64_t count = 0;
  std::vector<float> send, recv_init, expected;
  CaseStart start;
};

// Element i's sum over the n ranks' inputs.
float SumOverRanks(int n, int64_t i) {
  float sum = 0;
  for (int q = 0; q < n; ++q) sum += Value(q, i);
  return sum;
}

// The inputs of `op` on rank `me` of `n`, `c` elements per block, and what
// recv must hold after one run.
void FillCaseData(BenchOp op, int n, int me, int64_t c, Case* k) {
  switch (op) {
    case BenchOp::kAllReduce:
      for (int64_t i = 0; i < c; ++i)
        k->send.push_back(Value(me, i)), k->expected.push_back(SumOverRanks(n, i));
      break;
    case BenchOp::kReduceScatter:
      for (int64_t i = 0; i < n * c; ++i) k->send.push_back(Value(me, i));
      for (int64_t j = 0; j < c; ++j) k->expected.push_back(SumOverRanks(n, me * c + j));
      break;
    case BenchOp::kAllGather:
      for (int64_t j = 0; j < c; ++j) k->send.push_back(Value(me, j));
      for (int q = 0; q < n; ++q) {
        for (int64_t j = 0; j < c; ++j) k->expected.push_back(Value(q, j));
      }
      break;
    case BenchOp::kAllToAll:
      for (int q = 0; q < n; ++q) {
        for (int64_t j = 0; j < c; ++j)
          k->send.push_back(Element(me, q, j)), k->expected.push_back(Element(q, me, j));
      }
      break;
    case BenchOp::kBroadcast:
      for (int64_t i = 0; i < c; ++i) k->expected.push_back(Value(0, i));
      k->recv_init = me == 0 ? k->expected : std::vector<float>(c, 0.0f);
      break;
    case BenchOp::kSendRecv: {
      // A ring: each rank sends to the next and receives from the previous.
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      for (int64_t j = 0; j < c; ++j)
        k->send.push_back(Element(me, next, j)), k->expected.push_back(Element(prev, me, j));
      break;
    }
  }
  if (k->recv_init.empty()) k->recv_init.assign(k->expected.size(), 0.0f);
}

// How one run of `op` on `comm` starts.
CaseStart StartOf(BenchOp op, Communicator& comm) {
  switch (op) {
    case BenchOp::kAllReduce:
      return [&comm](const Tensor& s, const Tensor& r) {
        return comm.AllReduceAsync(s, r, ReduceOp::kSum);
      };
    case BenchOp::kReduceScatter:
      return [&comm](const Tensor& s, const Tensor& r) {
        return comm.ReduceScatterAsync(s, r, ReduceOp::kSum);
      };
    case BenchOp::kAllGather:
      return [&comm](const Tensor& s, const Tensor& r) { return comm.AllGatherAsync(s, r); };
    case BenchOp::kAllToAll:
      return [&comm](const Tensor& s, const Tensor& r) { return comm.AllToAllAsync(s, r); };
    case BenchOp::kBroadcast:
      return [&comm](const Tensor&, const Tensor& r) { return comm.BroadcastAsync(r, 0); };
    case BenchOp::kSendRecv: {
      // The ring of FillCaseData, as one grouped exchange: ungrouped, NCCL
      // refuses it at world size 1 (a send to oneself) and deadlocks it from
      // 2 up (every rank waits in its receive).
      const int n = comm.size(), me = comm.rank();
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      return [&comm, next, prev](const Tensor& s, const Tensor& r) {
        return comm.SendRecvAsync(s, next, r, prev);
      };
    }
  }
  return nullptr;
}

// Null when `bytes` is too small for one element per block.
std::optional<Case> MakeCase(BenchOp op, Communicator& comm, int64_t bytes) {
  const int n = comm.size(), me = comm.rank();
  const bool blocked =
      op == BenchOp::kReduceScatter || op == BenchOp::kAllGather || op == BenchOp::kAllToAll;
  const int64_t c = bytes / static_cast<int64_t>(sizeof(float)) / (blocked ? n : 1);
  if (c == 0) return std::nullopt;
  Case k;
  k.count = c * (blocked ? n : 1);
  k.bytes = k.count * static_cast<int64_t>(sizeof(float));
  FillCaseData(op, n, me, c, &k);
  k.start = StartOf(op, comm);
  return k;
}

struct Row {
  double seconds = 0;  // per operation, mean over ranks
  int64_t wrong = 0;   // over all ranks
};

// Checks one run, then times `iters` runs after `warmup`. On the device,
// runs are queued back to back and waited at the end, as nccl-tests does.
Row Measure(const Case& k, Communicator& comm, Communicator& world, const Options& options) {
  const Tensor send = Upload(k.send, options.device), recv = Upload(k.recv_init, options.device);
  k.start(send, recv).Wait();
  const std::vector<float> got = Download(recv);
  int32_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != k.expected[i];

  auto run = [&](int64_t times) {
    std::vector<CommHandle> pending;
    for (int64_t i = 0; i < times; ++i) {
      pending.push_back(k.start(send, recv));
      if (options.device == DeviceType::kCPU) pending.back().Wait();
    }
    for (CommHandle& handle : pending) handle.Wait();
  };
  run(options.warmup);
  comm.Barrier();
  Timer timer;
  run(options.iters);
  float seconds = static_cast<float>(timer.Seconds() / options.iters);
  const Tensor seconds_view = Tensor::View(&seconds, {1}, DType::kF32);
  const Tensor wrong_view = Tensor::View(&wrong, {1}, DType::kI32);
  world.AllReduce(seconds_view, seconds_view, ReduceOp::kMean);
  world.AllReduce(wrong_view, wrong_view, ReduceOp::kSum);
  return {seconds, wrong};
}

// The communicator the benchmark runs on: MPI's, or NCCL's bootstrapped from it.
absl::StatusOr<std::unique_ptr<Communicator>> BenchCommunicator(std::unique_ptr<Communicator> host,
                                                                DeviceType device) {
  if (device == DeviceType::kCPU) return host;
#ifdef TETRA_HAVE_CUDA
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    return UserError(absl::StrCat("tetra commbench: --device cuda but no CUDA device is visible (",
                                  rc == cudaSuccess ? "0 devices" : cudaGetErrorString(rc), ")"),
                     "run on a GPU node, or use --device cpu");
  }
  const int local_rank = LocalRank();
  const cudaError_t set = cudaSetDevice(local_rank % devices);
  TETRA_CHECK(set == cudaSuccess) << "cudaSetDevice(" << local_rank % devices
                                  << "): " << cudaGetErrorString(set);
  RETURN_IF_ERROR(AgreeOnStatus(*host, LoadNccl().status()));
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(host)));
#else
  return UserError("tetra commbench: --device cuda but this tetra was built without CUDA",
                   "rebuild where nvcc is found, or use --device cpu");
#endif
}

}  // namespace

absl::Status CommbenchCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(const Options options, ParseOptions(argc, argv));
  MpiSession session(&argc, &argv);
  std::unique_ptr<Communicator> world = MpiWorld(options.timeout_s);
  ASSIGN_OR_RETURN(const std::vector<int> group_ranks,
                   GroupRanks(options.group, world->rank(), world->size()));
  std::unique_ptr<Communicator> host_group = options.group == "world"
                                                 ? MpiWorld(options.timeout_s)
                                                 : world->Split(group_ranks, options.group);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   BenchCommunicator(std::move(host_group), options.device));

  const bool printer = world->rank() == 0;
  const int n = comm->size();
  if (printer) {
    std::cout << absl::StrFormat(
        "# tetra commbench: %d ranks, group %s (%d ranks each), device %s, %d iterations after %d "
        "warm-up\n# time is the mean over ranks; busbw = algbw x factor (nccl-tests)\n#\n"
        "#%13s %12s %6s %6s %11s %9s %9s %7s\n#%13s %12s %6s %6s %11s %9s %9s\n",
        world->size(), options.group, n, options.device == DeviceType::kCPU ? "cpu" : "cuda",
        options.iters, options.warmup, "size", "count", "type", "redop", "time", "algbw", "busbw",
        "#wrong", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)");
  }
  int64_t total_wrong = 0, rows = 0;
  double busbw_sum = 0;
  for (BenchOp op : options.ops) {
    if (printer) std::cout << "# " << OpName(op) << "\n";
    const bool reduces = op == BenchOp::kAllReduce || op == BenchOp::kReduceScatter;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.factor) {
      const std::optional<Case> k = MakeCase(op, *comm, bytes);
      if (!k) continue;
      const Row row = Measure(*k, *comm, *world, options);
      const double algbw = k->bytes / row.seconds / 1e9;
      const double busbw = algbw * BusFactor(op, n);
      total_wrong += row.wrong;
      busbw_sum += busbw;
      ++rows;
      if (printer) {
        std::cout << absl::StrFormat("%14d %12d %6s %6s %11.2f %9.3f %9.3f %7d\n", k->bytes,
                                     k->count, "float", reduces ? "sum" : "none", row.seconds * 1e6,
                                     algbw, busbw, row.wrong)
                  << std::flush;
      }
    }
  }
  if (printer) {
    std::cout << absl::StrFormat(
        "# Avg bus bandwidth    : %.3f GB/s\n# Wrong elements       : %d\n",
        rows > 0 ? busbw_sum / rows : 0.0, total_wrong);
  }
  if (total_wrong > 0) {
    return absl::InternalError(absl::StrCat("tetra commbench: ", total_wrong,
                                            " result elements were wrong (see the #wrong column)"));
  }
  return absl::OkStatus();
}

}  // namespace tetra
