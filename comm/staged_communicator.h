// The host-staged backend (parallel.comm_backend MPI): a Communicator over
// device and host tensors that moves them through host memory and an MPI
// group, for several ranks sharing one GPU (NCCL refuses two ranks on one
// device), as on a test machine with one GPU.
//
// It keeps NCCL's rules, so a job that runs on it runs on NCCL:
//   - no tags: point-to-point messages take tag 0 only (fatal otherwise) and
//     match in posting order, as MPI's non-overtaking order and NCCL do;
//     the receiver checks each message's size (the MPI backend does);
//   - point-to-point calls run as NCCL's stream runs them: one at a time, in
//     posting order, a send ending only once its receiver has reached the
//     matching receive (rendezvous: a go-ahead message from the receiver
//     precedes the data), a SendRecv's send and receive together. So two
//     ranks that each post a lone send (or each a lone receive) to the other
//     before the other half deadlock here as on NCCL, and the watchdog ends
//     the job naming the call;
//   - every collective is the same operation, dtype and size on every rank
//     of the group, in the same order: before it starts, the ranks gather
//     each other's description of it (and, for all-to-all(v), the send
//     counts, checked against every receiver's counts), and a mismatch ends
//     the job naming both ranks' operations, where NCCL would hang or
//     corrupt memory.
//
// A device tensor is copied into page-locked host memory after the work
// queued on the op API's current stream (Tensor::CopyFrom), moved by MPI,
// and copied back into the device tensor on that stream when the operation
// completes (the waiting thread copies, then the handle is complete), so its
// consumers on that stream see the result. Host tensors move directly. With
// host tensors only (a CPU run with comm_backend MPI) it is the MPI backend
// with NCCL's rules checked: the CPU layout checks run on it to prove the
// device path's communication order on every CI run.
#ifndef TETRA_COMM_STAGED_COMMUNICATOR_H_
#define TETRA_COMM_STAGED_COMMUNICATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tetra {

class StagedCommunicator : public Communicator {
 public:
  // `host` moves host tensors (an MPI group, or a group of one).
  explicit StagedCommunicator(std::unique_ptr<Communicator> host);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& ranks() const override { return host_->ranks(); }
  double timeout_s() const override { return host_->timeout_s(); }
  bool Serves(DeviceType) const override { return true; }

  std::unique_ptr<Communicator> Split(const std::vector<int>& world_ranks,
                                      const std::string& name) override;

 protected:
  CommHandle StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override;
  CommHandle StartReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override;
  CommHandle StartAllGather(const Tensor& send, const Tensor& recv) override;
  CommHandle StartAllToAll(const Tensor& send, const Tensor& recv) override;
  CommHandle StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_offsets, const Tensor& recv,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_offsets) override;
  CommHandle StartBroadcast(const Tensor& buffer, int root) override;
  CommHandle StartSend(const Tensor& buffer, int peer, int tag) override;
  CommHandle StartRecv(const Tensor& buffer, int peer, int tag) override;
  CommHandle StartSendRecv(const Tensor& send, int to, const Tensor& recv, int from) override;
  CommHandle StartBarrier() override;

 private:
  struct Transfer;
  // Queues a point-to-point call: host tensors `send` to `to` and/or `recv`
  // from `from` (undefined: that half is absent); its handle completes once
  // the call has run (its turn came and both halves are done).
  CommHandle Enqueue(const Tensor& send, int to, const Tensor& recv, int from, std::string what);
  // Runs the queue's calls in order as far as they complete now.
  void RunTransfers();
  // Starts `t` or moves it on; true once it is done.
  bool Advance(Transfer& t);

  // Gathers every rank's `operation` (and, when given, its all-to-all send
  // counts, checked against this rank's `recv_counts`); fatal on a mismatch.
  void CheckSameCollective(const std::string& operation,
                           const std::vector<int64_t>* send_counts = nullptr,
                           const std::vector<int64_t>* recv_counts = nullptr);

  std::unique_ptr<Communicator> host_;
  int64_t collectives_ = 0;  // issued on this group so far: names a mismatch
  std::deque<std::shared_ptr<Transfer>>
      transfers_;  // point-to-point calls not yet run, in posting order
};

}  // namespace tetra

#endif  // TETRA_COMM_STAGED_COMMUNICATOR_H_
