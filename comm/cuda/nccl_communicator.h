// NCCL backend: a Communicator over device memory. A group's NCCL
// communicator is bootstrapped through a host Communicator of the same group
// (rank 0 makes the ncclUniqueId and broadcasts it), which it keeps for Split.
// Operations are enqueued on one CUDA stream; a handle is complete when an
// event recorded after the operation has fired, and it fails fatally on an
// NCCL asynchronous error. On a watchdog timeout the NCCL communicator is
// aborted before the job ends, so no kernel is left spinning.
//
// Ordering: operations run on `stream`, after the work already queued there.
// Pass the stream that produces and consumes the buffers (the default,
// nullptr, is CUDA's legacy stream: ordered with every blocking stream, no
// overlap), or make it wait on the producer's event before each operation.
#ifndef TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_
#define TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tetra {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `host`; joins on the current CUDA device.
  explicit NcclCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& ranks() const override { return host_->ranks(); }
  double timeout_s() const override { return host_->timeout_s(); }
  cudaStream_t stream() const { return stream_; }

  CommHandle AllReduceAsync(const void* send, void* recv, int64_t count, DType dtype,
                            ReduceOp op) override;
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType dtype,
                                ReduceOp op) override;
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType dtype) override;
  // All-to-all(v) is grouped ncclSend/ncclRecv, one pair per peer.
  CommHandle AllToAllAsync(const void* send, void* recv, int64_t count, DType dtype) override;
  CommHandle AllToAllVAsync(const void* send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_offsets, void* recv,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_offsets, DType dtype) override;
  CommHandle BroadcastAsync(void* buffer, int64_t count, DType dtype, int root) override;
  CommHandle SendAsync(const void* buffer, int64_t count, DType dtype, int peer, int tag) override;
  CommHandle RecvAsync(void* buffer, int64_t count, DType dtype, int peer, int tag) override;
  // NCCL has no barrier: an all-reduce of one device integer stands in.
  CommHandle BarrierAsync() override;

  std::unique_ptr<Communicator> Split(const std::vector<int>& world_ranks,
                                      const std::string& name) override;

 private:
  // Records an event after the operations just enqueued; the handle polls it.
  CommHandle Watch(std::function<std::string()> describe);
  // Grouped send/recv blocks: the shared body of AllToAll and AllToAllV.
  void EnqueueAllToAll(const void* send, const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& send_offsets, void* recv,
                       const std::vector<int64_t>& recv_counts,
                       const std::vector<int64_t>& recv_offsets, DType dtype);

  std::unique_ptr<Communicator> host_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  int* barrier_word_ = nullptr;  // device memory for BarrierAsync
};

}  // namespace tetra

#endif  // TETRA_COMM_CUDA_NCCL_COMMUNICATOR_H_
