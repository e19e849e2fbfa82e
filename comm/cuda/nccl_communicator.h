// NCCL backend: a Communicator over device tensors. A group's NCCL
// communicator is bootstrapped through a host Communicator of the same group
// (rank 0 makes the ncclUniqueId and broadcasts it), which it keeps for Split.
// Operations are enqueued on one CUDA stream; a handle is complete when an
// event recorded after the operation has fired, and it fails fatally on an
// NCCL asynchronous error. On a watchdog timeout the NCCL communicator is
// aborted before the job ends, so no kernel is left spinning. NCCL is loaded
// at run time: call LoadNccl() (comm/cuda/nccl_library.h) first for a clear
// error where it is missing.
//
// Host tensors (scalars, counts) travel through that host group (host_route).
//
// Ordering: operations run on `stream`, after the work already queued there
// and on the op API's current stream (cuda::CurrentStream, where tensors are
// produced and where the Communicator widens BF16 for a reduction). Pass the
// stream that consumes the results (the default, nullptr, is CUDA's legacy
// stream: ordered with every blocking stream, no overlap), or make the
// consumer wait on it.
#ifndef TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_
#define TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/cuda/stream.h"

namespace tetra {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `host`; joins on the current CUDA device.
  explicit NcclCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream = nullptr);
  // The same on a communication stream of its own, which its Splits share: a
  // training job's groups, whose operations (the data-parallel buckets) run
  // beside the op API's stream instead of after everything on it.
  static std::unique_ptr<NcclCommunicator> OnOwnStream(std::unique_ptr<Communicator> host);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& ranks() const override { return host_->ranks(); }
  double timeout_s() const override { return host_->timeout_s(); }
  bool Serves(DeviceType device) const override { return device == DeviceType::kCUDA; }
  Communicator* host_route() const override { return host_.get(); }
  cudaStream_t stream() const { return stream_; }

  // A group of one is a SelfCommunicator (it moves nothing, on either device).
  std::unique_ptr<Communicator> Split(const std::vector<int>& world_ranks,
                                      const std::string& name) override;

 protected:
  CommHandle StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override;
  CommHandle StartReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override;
  CommHandle StartAllGather(const Tensor& send, const Tensor& recv) override;
  // All-to-all(v) is grouped ncclSend/ncclRecv, one pair per peer.
  CommHandle StartAllToAll(const Tensor& send, const Tensor& recv) override;
  CommHandle StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_offsets, const Tensor& recv,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_offsets) override;
  CommHandle StartBroadcast(const Tensor& buffer, int root) override;
  CommHandle StartSend(const Tensor& buffer, int peer, int tag) override;
  CommHandle StartRecv(const Tensor& buffer, int peer, int tag) override;
  CommHandle StartSendRecv(const Tensor& send, int to, const Tensor& recv, int from) override;
  // NCCL has no barrier: an all-reduce of one device integer stands in.
  CommHandle StartBarrier() override;

 private:
  // Makes stream_ wait for the work queued so far on the op API's current
  // stream; every operation calls it before enqueuing.
  void AfterCurrentStream();
  // Records an event after the operations just enqueued; the handle polls it.
  CommHandle Watch(std::function<std::string()> describe);
  // Grouped send/recv blocks: the shared body of AllToAll and AllToAllV.
  void EnqueueAllToAll(const Tensor& send, const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& send_offsets, const Tensor& recv,
                       const std::vector<int64_t>& recv_counts,
                       const std::vector<int64_t>& recv_offsets);

  std::unique_ptr<Communicator> host_;
  std::shared_ptr<cuda::Stream> own_stream_;  // set by OnOwnStream; stream_ is it
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  int* barrier_word_ = nullptr;      // device memory for StartBarrier
  cuda::Event current_stream_done_;  // for AfterCurrentStream
};

}  // namespace tetra

#endif  // TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_
