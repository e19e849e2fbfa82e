#include "comm/staged_communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/backend_util.h"
#include "core/logging.h"

namespace tetra {
namespace {

// A collective's description travels in this many bytes (longer ones are cut).
constexpr int kOperationBytes = 128;
static_assert(kOperationBytes % sizeof(int32_t) == 0);

// Where a result for `t` lands on the host: `t` itself there, else page-locked memory.
Tensor HostResult(const Tensor& t) {
  return t.device() == DeviceType::kCPU ? t : Tensor::PinnedHost(t.shape(), t.dtype());
}

// `handle`, complete once the result in `host` is back in `out` (nothing to
// copy where `out` is the host tensor itself), keeping `staged` alive until
// the operation has completed.
CommHandle Returned(CommHandle handle, std::vector<Tensor> staged, const Tensor& host,
                    const Tensor& out) {
  return std::move(handle).Then([staged = std::move(staged), host, out] {
    if (out.defined() && host.raw() != out.raw()) out.CopyFrom(host);
  });
}

// A collective from `send` into `recv` run by `start` on their host sides:
// send copied to the host, recv's result copied back when it completes. With
// `fill_recv`, recv's current values go to the host too (parts the operation
// leaves unwritten come back as they were).
template <typename Start>
CommHandle Staged(const Tensor& send, const Tensor& recv, Start start, bool fill_recv = false) {
  const Tensor host_send = OnHost(send);
  const Tensor host_recv = fill_recv ? OnHost(recv) : HostResult(recv);
  return Returned(start(host_send, host_recv), {host_send}, host_recv, recv);
}

std::string Sized(const std::string& op, int64_t count, DType dtype) {
  return absl::StrCat(op, " of ", count, " ", DTypeName(dtype));
}

// Host tags of the point-to-point traffic: a receiver's go-ahead and the data.
constexpr int kGoAheadTag = 1, kDataTag = 0;

}  // namespace

// One point-to-point call: a send, a receive, or both (SendRecv).
struct StagedCommunicator::Transfer {
  Tensor send;  // host side; undefined: no send
  int to = -1;
  Tensor recv;  // host side; undefined: no receive
  int from = -1;
  int32_t go_ahead_out = 1, go_ahead_in = 0;
  CommHandle go_ahead_sent, go_ahead_received, data_sent, data_received;
  bool started = false, sending = false, done = false;
};

bool StagedCommunicator::Advance(Transfer& t) {
  if (!t.started) {
    t.started = true;
    if (t.recv.defined()) {
      t.go_ahead_sent =
          host_->SendAsync(Tensor::View(&t.go_ahead_out, {1}, DType::kI32), t.from, kGoAheadTag);
      t.data_received = host_->RecvAsync(t.recv, t.from, kDataTag);
    }
    if (t.send.defined()) {
      t.go_ahead_received =
          host_->RecvAsync(Tensor::View(&t.go_ahead_in, {1}, DType::kI32), t.to, kGoAheadTag);
    }
  }
  if (t.send.defined() && !t.sending && t.go_ahead_received.Test()) {
    t.sending = true;
    t.data_sent = host_->SendAsync(t.send, t.to, kDataTag);
  }
  // Every handle polled each time, so each makes progress.
  const bool go_ahead_sent = t.go_ahead_sent.Test(), received = t.data_received.Test();
  const bool sent = !t.send.defined() || (t.sending && t.data_sent.Test());
  return go_ahead_sent && received && sent;
}

void StagedCommunicator::RunTransfers() {
  while (!transfers_.empty() && Advance(*transfers_.front())) {
    transfers_.front()->done = true;
    transfers_.pop_front();
  }
}

CommHandle StagedCommunicator::Enqueue(const Tensor& send, int to, const Tensor& recv, int from,
                                       std::string what) {
  auto transfer = std::make_shared<Transfer>();
  transfer->send = send;
  transfer->to = to;
  transfer->recv = recv;
  transfer->from = from;
  transfers_.push_back(transfer);
  RunTransfers();
  const std::string description = absl::StrCat(
      what, " on ", DescribeGroup(*this),
      " (run as NCCL runs it: one point-to-point call at a time in posting order, a send ending "
      "once its "
      "receiver reaches the matching receive; two ranks that each post a lone send, or each a lone "
      "receive, to the other first deadlock: post such a pair with SendRecvAsync)");
  return CommHandle(
      [this, transfer] {
        RunTransfers();
        return transfer->done;
      },
      [description] { return description; }, timeout_s());
}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host)
    : host_(std::move(host)) {
  TETRA_CHECK(host_ != nullptr && host_->Serves(DeviceType::kCPU))
      << "the staged communicator moves tensors through a host communicator";
}

std::unique_ptr<Communicator> StagedCommunicator::Split(const std::vector<int>& world_ranks,
                                                        const std::string& name) {
  return std::make_unique<StagedCommunicator>(host_->Split(world_ranks, name));
}

void StagedCommunicator::CheckSameCollective(const std::string& operation,
                                             const std::vector<int64_t>* send_counts,
                                             const std::vector<int64_t>* recv_counts) {
  const int64_t index = collectives_++;
  if (size() == 1) return;
  const int n = size();
  std::vector<char> mine(kOperationBytes, '\0'), all(static_cast<size_t>(n) * kOperationBytes);
  std::memcpy(mine.data(), operation.data(),
              std::min<size_t>(operation.size(), kOperationBytes - 1));
  constexpr int64_t words = kOperationBytes / sizeof(int32_t);
  host_->AllGather(Tensor::View(mine.data(), {words}, DType::kI32),
                   Tensor::View(all.data(), {n * words}, DType::kI32));
  for (int r = 0; r < n; ++r) {
    const std::string theirs(all.data() + static_cast<size_t>(r) * kOperationBytes);
    TETRA_CHECK(theirs == mine.data())
        << "collective #" << index << " on " << DescribeGroup(*this) << ": this rank (" << rank()
        << ") issues " << mine.data() << " but " << DescribeGroupRank(*this, r) << " issues "
        << theirs
        << "; every rank of a group must issue the same collectives in the same order (NCCL would "
           "hang)";
  }
  if (send_counts == nullptr) return;
  // Row r: what rank r sends to each rank; column rank() must be what this rank expects.
  std::vector<double> my_counts(send_counts->begin(), send_counts->end()),
      counts(static_cast<size_t>(n) * n);
  host_->AllGather(Tensor::View(my_counts.data(), {n}, DType::kF64),
                   Tensor::View(counts.data(), {n * n}, DType::kF64));
  for (int r = 0; r < n; ++r) {
    const double sent = counts[static_cast<size_t>(r) * n + rank()];
    TETRA_CHECK(sent == static_cast<double>((*recv_counts)[r]))
        << operation << " #" << index << " on " << DescribeGroup(*this) << ": "
        << DescribeGroupRank(*this, r) << " sends " << sent << " elements to rank " << rank()
        << ", which expects " << (*recv_counts)[r] << " (NCCL would hang or corrupt memory)";
  }
}

CommHandle StagedCommunicator::StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
  CheckSameCollective(
      Sized(absl::StrCat("all_reduce (", ReduceOpName(op), ")"), recv.numel(), recv.dtype()));
  // In place on the host stays in place; on the device the staged copies are distinct.
  return Staged(send, recv,
                [&](const Tensor& s, const Tensor& r) { return host_->AllReduceAsync(s, r, op); });
}

CommHandle StagedCommunicator::StartReduceScatter(const Tensor& send, const Tensor& recv,
                                                  ReduceOp op) {
  CheckSameCollective(
      Sized(absl::StrCat("reduce_scatter (", ReduceOpName(op), ")"), send.numel(), send.dtype()));
  return Staged(send, recv, [&](const Tensor& s, const Tensor& r) {
    return host_->ReduceScatterAsync(s, r, op);
  });
}

CommHandle StagedCommunicator::StartAllGather(const Tensor& send, const Tensor& recv) {
  CheckSameCollective(Sized("all_gather", recv.numel(), recv.dtype()));
  return Staged(send, recv,
                [&](const Tensor& s, const Tensor& r) { return host_->AllGatherAsync(s, r); });
}

CommHandle StagedCommunicator::StartAllToAll(const Tensor& send, const Tensor& recv) {
  CheckSameCollective(Sized("all_to_all", send.numel(), send.dtype()));
  return Staged(send, recv,
                [&](const Tensor& s, const Tensor& r) { return host_->AllToAllAsync(s, r); });
}

CommHandle StagedCommunicator::StartAllToAllV(const Tensor& send,
                                              const std::vector<int64_t>& send_counts,
                                              const std::vector<int64_t>& send_offsets,
                                              const Tensor& recv,
                                              const std::vector<int64_t>& recv_counts,
                                              const std::vector<int64_t>& recv_offsets) {
  CheckSameCollective(absl::StrCat("all_to_all_v of ", DTypeName(send.dtype())), &send_counts,
                      &recv_counts);
  return Staged(
      send, recv,
      [&](const Tensor& s, const Tensor& r) {
        return host_->AllToAllVAsync(s, send_counts, send_offsets, r, recv_counts, recv_offsets);
      },
      /*fill_recv=*/true);
}

CommHandle StagedCommunicator::StartBroadcast(const Tensor& buffer, int root) {
  CheckSameCollective(Sized(absl::StrCat("broadcast from ", root), buffer.numel(), buffer.dtype()));
  const Tensor host = rank() == root ? OnHost(buffer) : HostResult(buffer);
  return Returned(host_->BroadcastAsync(host, root), {}, host, buffer);
}

CommHandle StagedCommunicator::StartSend(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag == 0) << "send: NCCL has no tags (got " << tag
                        << "); order the transfers instead";
  const Tensor host = OnHost(buffer);
  return Enqueue(host, peer, Tensor(), -1,
                 absl::StrCat(Sized("send", buffer.numel(), buffer.dtype()), " to ",
                              DescribeGroupRank(*this, peer)));
}

CommHandle StagedCommunicator::StartRecv(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag == 0) << "recv: NCCL has no tags (got " << tag
                        << "); order the transfers instead";
  const Tensor host = HostResult(buffer);
  return Returned(Enqueue(Tensor(), -1, host, peer,
                          absl::StrCat(Sized("recv", buffer.numel(), buffer.dtype()), " from ",
                                       DescribeGroupRank(*this, peer))),
                  {}, host, buffer);
}

CommHandle StagedCommunicator::StartSendRecv(const Tensor& send, int to, const Tensor& recv,
                                             int from) {
  const Tensor host_send = OnHost(send), host_recv = HostResult(recv);
  return Returned(Enqueue(host_send, to, host_recv, from,
                          absl::StrCat(Sized("send_recv", send.numel(), send.dtype()), " to ",
                                       DescribeGroupRank(*this, to), ", ", recv.numel(), " from ",
                                       DescribeGroupRank(*this, from))),
                  {}, host_recv, recv);
}

CommHandle StagedCommunicator::StartBarrier() {
  CheckSameCollective("barrier");
  return host_->BarrierAsync();
}

}  // namespace tetra
