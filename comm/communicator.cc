#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "comm/backend_util.h"
#include "core/device_work.h"
#include "core/logging.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

// Polls before the first sleep: short operations finish inside the spin
// without paying a sleep's wake-up latency. Each spin yields the core, so
// oversubscribed ranks (tests: 8 ranks on 2 cores) let their peers run.
constexpr int kSpinPolls = 1000;
constexpr std::chrono::microseconds kFirstSleep{1};
constexpr std::chrono::microseconds kMaxSleep{1000};
// Longest rank list a message spells out before shortening it.
constexpr size_t kMaxListedRanks = 16;

std::function<void()>& AbortHandler() {
  static std::function<void()> handler = [] { _exit(1); };
  return handler;
}

WaitHooks& Hooks() {
  static WaitHooks hooks;
  return hooks;
}

// Why the wait did not complete, as far as the ranks' answers tell.
std::string TimeoutCause() {
  const std::string missing = Hooks().missing_ranks ? Hooks().missing_ranks() : "";
  if (!missing.empty()) return missing + ": lost, or stuck outside communication";
  return Hooks().missing_ranks
             ? "every rank answered a liveness probe, so one of the group issued another operation"
             : "a rank of the group did not join or is stuck";
}

// {"0-3", "8", "10"}: runs of three or more consecutive ranks as ranges.
std::vector<std::string> RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j >= i + 2) {
      parts.push_back(absl::StrCat(ranks[i], "-", ranks[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(absl::StrCat(ranks[k]));
    }
    i = j + 1;
  }
  return parts;
}

const char* DeviceName(DeviceType device) { return device == DeviceType::kCPU ? "CPU" : "CUDA"; }

// "BF16 [4, 8] on CPU"
std::string TensorKind(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", ShapeString(t.shape()), " on ",
                      DeviceName(t.device()));
}

// Fatal unless `t` has storage (or no elements) on a device `comm` serves.
void CheckServed(const Communicator& comm, const Tensor& t, const char* op) {
  TETRA_CHECK(t.defined() || t.numel() == 0)
      << op << ": tensor " << TensorKind(t) << " has no storage";
  TETRA_CHECK(comm.Serves(t.device()))
      << op << " on " << DescribeGroup(comm) << ": this communicator does not move "
      << DeviceName(t.device()) << " tensors (" << TensorKind(t)
      << "); use the group's communicator for that device (MPI: host, NCCL: device)";
}

// Fatal unless send and recv share dtype and a served device.
void CheckPair(const Communicator& comm, const Tensor& send, const Tensor& recv, const char* op) {
  TETRA_CHECK(send.dtype() == recv.dtype() && send.device() == recv.device())
      << op << ": send is " << TensorKind(send) << " but recv is " << TensorKind(recv)
      << "; the tensors of one call share dtype and device";
  CheckServed(comm, send, op);
  CheckServed(comm, recv, op);
}

// Fatal when `peer` is this rank: NCCL refuses a lone send or receive to oneself.
void CheckNotSelf(const Communicator& comm, int peer, const char* op) {
  TETRA_CHECK(peer != comm.rank())
      << op << " to this rank itself (" << DescribeGroupRank(comm, peer) << ") on "
      << DescribeGroup(comm) << " outside a group: NCCL refuses a lone send or receive to oneself"
      << "\nhint: exchange with SendRecvAsync, which pairs the two as one group";
}

// Reductions of these accumulate in F32 (see communicator.h).
bool ReducesWidened(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

// An F32 copy of `t`, flat, on its device.
Tensor Widened(const Tensor& t) {
  const Tensor wide = Tensor::Empty({t.numel()}, DType::kF32, t.device());
  ops::Cast(t, wide);
  return wide;
}

// Every rank's `value`, in rank order.
std::vector<double> GatherDoubles(Communicator& group, double value) {
  const int n = group.size();
  std::vector<double> values(n);
  const Tensor mine = Tensor::View(&value, {1}, DType::kF64);
  const Tensor all = Tensor::View(values.data(), {n}, DType::kF64);
  if (group.Serves(DeviceType::kCPU)) {
    group.AllGather(mine, all);
  } else {  // a device-only backend: gathered in place in device memory
    const Tensor gathered = Tensor::Empty({n}, DType::kF64, DeviceType::kCUDA);
    const Tensor own = gathered.Slice(group.rank(), group.rank() + 1);
    own.CopyFrom(mine);
    group.AllGather(own, gathered);
    all.CopyFrom(gathered);
  }
  return values;
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMean:
      return "mean";
  }
  return "?";
}

double SumOverRanks(Communicator& group, double value) {
  if (group.size() == 1) return value;
  double sum = 0;
  for (double v : GatherDoubles(group, value)) sum += v;
  return sum;
}

double MaxOverRanks(Communicator& group, double value) {
  if (group.size() == 1) return value;
  const std::vector<double> values = GatherDoubles(group, value);
  return *std::max_element(values.begin(), values.end());
}

std::vector<std::string> AllGatherStrings(Communicator& group, const std::string& mine) {
  const int n = group.size();
  // Bytes travel as I32 words: lengths first, then every string padded to the longest.
  int32_t length = static_cast<int32_t>(mine.size());
  std::vector<int32_t> lengths(n);
  group.AllGather(Tensor::View(&length, {1}, DType::kI32),
                  Tensor::View(lengths.data(), {n}, DType::kI32));
  const int64_t words = (*std::max_element(lengths.begin(), lengths.end()) + 3) / 4;
  std::vector<int32_t> send(words, 0), all(words * n);
  std::copy(mine.begin(), mine.end(), reinterpret_cast<char*>(send.data()));
  group.AllGather(Tensor::View(send.data(), {words}, DType::kI32),
                  Tensor::View(all.data(), {words * n}, DType::kI32));
  std::vector<std::string> strings;
  for (int r = 0; r < n; ++r) {
    strings.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), lengths[r]);
  }
  return strings;
}

absl::Status AgreeOnStatus(Communicator& group, absl::Status status) {
  // The lowest failed rank, as -max(-rank); group.size() when none failed.
  const int failed =
      static_cast<int>(-MaxOverRanks(group, -(status.ok() ? group.size() : group.rank())));
  if (!status.ok() || failed == group.size()) return status;
  return absl::AbortedError(
      absl::StrCat("rank ", group.ranks()[failed], " failed (see its error above)"));
}

std::string DescribeGroup(const Communicator& comm) {
  std::vector<std::string> parts = RankRanges(comm.ranks());
  std::string list;
  if (parts.size() > kMaxListedRanks) {
    parts.resize(kMaxListedRanks / 2);
    list = absl::StrCat(absl::StrJoin(parts, ", "), ", ..., ", comm.ranks().back(), "; ",
                        comm.size(), " ranks");
  } else {
    list = absl::StrJoin(parts, ", ");
  }
  return absl::StrCat("group ", comm.name(), " (world ranks ", list, ")");
}

Communicator* Communicator::HostRouteFor(const Tensor& t) const {
  return t.device() == DeviceType::kCPU && !Serves(DeviceType::kCPU) ? host_route() : nullptr;
}

CommHandle Communicator::AllReduceAsync(const Tensor& send, const Tensor& recv, ReduceOp op) {
  if (Communicator* host = HostRouteFor(send)) return host->AllReduceAsync(send, recv, op);
  CheckPair(*this, send, recv, "all_reduce");
  TETRA_CHECK(send.numel() == recv.numel())
      << "all_reduce: send holds " << send.numel() << " elements but recv " << recv.numel();
  if (send.raw() != recv.raw()) CheckDisjoint(send, recv, "all_reduce");
  if (!ReducesWidened(send.dtype())) return StartAllReduce(send, recv, op);
  // The F32 copy is reduced in place, then narrowed into recv.
  const Tensor wide = Widened(send);
  return StartAllReduce(wide, wide, op).Then([wide, recv] { ops::Cast(wide, recv); });
}

CommHandle Communicator::ReduceScatterAsync(const Tensor& send, const Tensor& recv, ReduceOp op) {
  if (Communicator* host = HostRouteFor(send)) return host->ReduceScatterAsync(send, recv, op);
  CheckPair(*this, send, recv, "reduce_scatter");
  TETRA_CHECK(send.numel() == size() * recv.numel())
      << "reduce_scatter: send holds " << send.numel() << " elements, not " << size()
      << " blocks of recv's " << recv.numel() << " (group " << name() << ")";
  if (!IsOwnBlock(*this, send, recv)) CheckDisjoint(send, recv, "reduce_scatter");
  if (!ReducesWidened(send.dtype())) return StartReduceScatter(send, recv, op);
  // The F32 copy is reduced in place (this rank's block a view of it), then
  // the block is narrowed into recv.
  const Tensor wide = Widened(send);
  const Tensor block = ElementRange(wide, rank() * recv.numel(), recv.numel());
  return StartReduceScatter(wide, block, op).Then([block, recv] { ops::Cast(block, recv); });
}

CommHandle Communicator::AllGatherAsync(const Tensor& send, const Tensor& recv) {
  if (Communicator* host = HostRouteFor(send)) return host->AllGatherAsync(send, recv);
  CheckPair(*this, send, recv, "all_gather");
  TETRA_CHECK(recv.numel() == size() * send.numel())
      << "all_gather: recv holds " << recv.numel() << " elements, not " << size()
      << " blocks of send's " << send.numel() << " (group " << name() << ")";
  if (!IsOwnBlock(*this, recv, send)) CheckDisjoint(send, recv, "all_gather");
  return StartAllGather(send, recv);
}

CommHandle Communicator::AllToAllAsync(const Tensor& send, const Tensor& recv) {
  if (Communicator* host = HostRouteFor(send)) return host->AllToAllAsync(send, recv);
  CheckPair(*this, send, recv, "all_to_all");
  TETRA_CHECK(send.numel() == recv.numel() && send.numel() % size() == 0)
      << "all_to_all: send holds " << send.numel() << " elements and recv " << recv.numel()
      << "; both must hold the same number, in " << size() << " equal blocks (group " << name()
      << ")";
  CheckDisjoint(send, recv, "all_to_all");  // no in-place form
  return StartAllToAll(send, recv);
}

CommHandle Communicator::AllToAllVAsync(const Tensor& send, const std::vector<int64_t>& send_counts,
                                        const std::vector<int64_t>& send_offsets,
                                        const Tensor& recv, const std::vector<int64_t>& recv_counts,
                                        const std::vector<int64_t>& recv_offsets) {
  if (Communicator* host = HostRouteFor(send)) {
    return host->AllToAllVAsync(send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
  }
  CheckPair(*this, send, recv, "all_to_all_v");
  const int64_t send_extent = CheckBlocks(*this, send_counts, send_offsets, "send");
  const int64_t recv_extent = CheckBlocks(*this, recv_counts, recv_offsets, "recv");
  TETRA_CHECK(send_extent <= send.numel() && recv_extent <= recv.numel())
      << "all_to_all_v: the blocks reach element " << send_extent << " of send and " << recv_extent
      << " of recv, which hold " << send.numel() << " and " << recv.numel();
  CheckDisjoint(ElementRange(send, 0, send_extent), ElementRange(recv, 0, recv_extent),
                "all_to_all_v");
  return StartAllToAllV(send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
}

CommHandle Communicator::BroadcastAsync(const Tensor& buffer, int root) {
  if (Communicator* host = HostRouteFor(buffer)) return host->BroadcastAsync(buffer, root);
  CheckServed(*this, buffer, "broadcast");
  CheckGroupRank(*this, root, "root", "broadcast");
  return StartBroadcast(buffer, root);
}

CommHandle Communicator::SendAsync(const Tensor& buffer, int peer, int tag) {
  if (Communicator* host = HostRouteFor(buffer)) return host->SendAsync(buffer, peer, tag);
  CheckServed(*this, buffer, "send");
  CheckGroupRank(*this, peer, "peer", "send");
  CheckNotSelf(*this, peer, "send");
  return StartSend(buffer, peer, tag);
}

CommHandle Communicator::RecvAsync(const Tensor& buffer, int peer, int tag) {
  if (Communicator* host = HostRouteFor(buffer)) return host->RecvAsync(buffer, peer, tag);
  CheckServed(*this, buffer, "recv");
  CheckGroupRank(*this, peer, "peer", "recv");
  CheckNotSelf(*this, peer, "recv");
  return StartRecv(buffer, peer, tag);
}

CommHandle Communicator::SendRecvAsync(const Tensor& send, int to, const Tensor& recv, int from) {
  if (Communicator* host = HostRouteFor(send)) return host->SendRecvAsync(send, to, recv, from);
  CheckPair(*this, send, recv, "send_recv");
  CheckGroupRank(*this, to, "peer", "send_recv");
  CheckGroupRank(*this, from, "peer", "send_recv");
  CheckDisjoint(send, recv, "send_recv");
  TETRA_CHECK((to == rank()) == (from == rank()))
      << "send_recv on " << DescribeGroup(*this) << ": sends to " << DescribeGroupRank(*this, to)
      << " and receives from " << DescribeGroupRank(*this, from)
      << "; a send to this rank itself is received by the same call (to and from both this rank)";
  if (to == rank()) {
    TETRA_CHECK(send.numel() == recv.numel())
        << "send_recv with itself on " << DescribeGroup(*this) << ": sends " << send.numel()
        << " elements into a receive of " << recv.numel();
    recv.CopyFrom(send);
    return CommHandle();
  }
  return StartSendRecv(send, to, recv, from);
}

WaitHooks SetWaitHooks(WaitHooks hooks) { return std::exchange(Hooks(), std::move(hooks)); }

std::function<void()> SetCommAbortHandler(std::function<void()> handler) {
  TETRA_CHECK(handler != nullptr) << "the comm abort handler must be callable";
  return std::exchange(AbortHandler(), std::move(handler));
}

CommHandle::CommHandle(std::function<bool()> poll, std::function<std::string()> describe,
                       double timeout_s, std::function<void()> on_timeout)
    : poll_(std::move(poll)),
      describe_(std::move(describe)),
      on_timeout_(std::move(on_timeout)),
      timeout_s_(timeout_s),
      done_(false) {
  TETRA_CHECK(poll_ != nullptr && describe_ != nullptr)
      << "a pending CommHandle needs poll and describe";
  TETRA_CHECK(timeout_s_ > 0) << "comm timeout must be positive, got " << timeout_s_ << " s";
}

CommHandle::CommHandle(CommHandle&& other) noexcept
    : poll_(std::move(other.poll_)),
      describe_(std::move(other.describe_)),
      on_timeout_(std::move(other.on_timeout_)),
      timeout_s_(other.timeout_s_),
      done_(std::exchange(other.done_, true)) {}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    Wait();
    poll_ = std::move(other.poll_);
    describe_ = std::move(other.describe_);
    on_timeout_ = std::move(other.on_timeout_);
    timeout_s_ = other.timeout_s_;
    done_ = std::exchange(other.done_, true);
  }
  return *this;
}

CommHandle::~CommHandle() { Wait(); }

CommHandle CommHandle::Then(std::function<void()> after) && {
  TETRA_CHECK(after != nullptr) << "CommHandle::Then needs a step to run";
  if (done_) {
    after();
    return CommHandle();
  }
  CommHandle next(std::move(*this));
  // The outer handle stops polling once this returns true: `after` runs once.
  next.poll_ = [poll = std::move(next.poll_), after = std::move(after)] {
    if (!poll()) return false;
    after();
    return true;
  };
  return next;
}

bool CommHandle::Test() {
  if (!done_ && poll_()) {
    done_ = true;
    poll_ = nullptr;
    describe_ = nullptr;
    on_timeout_ = nullptr;
  }
  return done_;
}

void CommHandle::Wait() {
  if (done_) return;
  CountDeviceWork(DeviceWork::kHostWait);
  Timer timer;
  auto sleep = kFirstSleep;
  for (int polls = 0; !Test(); ++polls) {
    if (polls < kSpinPolls) {
      std::this_thread::yield();
      continue;
    }
    const double waited = timer.Seconds();
    if (waited > timeout_s_) {
      const int rank = LogRank();
      const std::string who = rank >= 0 ? absl::StrCat("rank ", rank, " (world)") : "this process";
      const std::string message = absl::StrFormat(
          "tetra: error: %s waited %.1f s for %s without completing; %s\nhint: check that every "
          "rank of the group issues the same operations in the same order; if it is only slow, "
          "raise parallel.comm_timeout_s (now %g s)\n",
          who, waited, describe_(), TimeoutCause(), timeout_s_);
      std::fputs(message.c_str(), stderr);
      std::fflush(stderr);
      if (on_timeout_) on_timeout_();
      AbortHandler()();
      _exit(1);
    }
    if (Hooks().while_sleeping) Hooks().while_sleeping();
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

}  // namespace tetra
