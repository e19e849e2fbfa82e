#include "comm/cuda/nccl_communicator.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/backend_util.h"
#include "comm/cuda/nccl_library.h"
#include "comm/self_communicator.h"
#include "core/device_work.h"
#include "core/logging.h"

// Failed CUDA and NCCL calls are broken invariants: fatal, with file:line.
#define TETRA_NCCL_CUDA_CHECK(call)                            \
  do {                                                         \
    const cudaError_t tetra_cuda_rc = (call);                  \
    TETRA_CHECK(tetra_cuda_rc == cudaSuccess)                  \
        << #call << ": " << cudaGetErrorString(tetra_cuda_rc); \
  } while (0)
#define TETRA_NCCL_CHECK(call)                                           \
  do {                                                                   \
    const ncclResult_t tetra_nccl_rc = (call);                           \
    TETRA_CHECK(tetra_nccl_rc == ncclSuccess)                            \
        << #call << ": " << Nccl().GetErrorString(tetra_nccl_rc) << " (" \
        << Nccl().GetLastError(nullptr) << ")";                          \
  } while (0)

namespace tetra {
namespace {

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kF64:
      return ncclFloat64;
  }
  TETRA_CHECK(false) << "unknown dtype";
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op, DType dtype, const char* op_name) {
  TETRA_CHECK(op != ReduceOp::kMean || dtype != DType::kI32)
      << op_name << ": mean of I32 is not defined (integer division); reduce with sum";
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMean:
      return ncclAvg;
  }
  return ncclSum;
}

std::string OpWithReduction(const char* op_name, ReduceOp op) {
  return absl::StrCat(op_name, " (", ReduceOpName(op), ")");
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream)
    : host_(std::move(host)), stream_(stream) {
  ncclUniqueId id;
  static_assert(sizeof(id) % sizeof(int32_t) == 0);
  if (host_->rank() == 0) TETRA_NCCL_CHECK(Nccl().GetUniqueId(&id));
  host_->Broadcast(Tensor::View(&id, {sizeof(id) / sizeof(int32_t)}, DType::kI32), 0);
  TETRA_NCCL_CHECK(Nccl().CommInitRank(&comm_, size(), id, rank()));
  TETRA_NCCL_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int)));
  TETRA_NCCL_CUDA_CHECK(cudaMemsetAsync(barrier_word_, 0, sizeof(int), stream_));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::OnOwnStream(
    std::unique_ptr<Communicator> host) {
  auto stream = std::make_shared<cuda::Stream>();
  auto comm = std::make_unique<NcclCommunicator>(std::move(host), stream->get());
  comm->own_stream_ = std::move(stream);
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  Nccl().CommDestroy(comm_);
  cudaFree(barrier_word_);
}

void NcclCommunicator::AfterCurrentStream() {
  const cudaStream_t current = cuda::CurrentStream();
  if (current == stream_) return;
  current_stream_done_.Record(current);
  current_stream_done_.Wait(stream_);
}

CommHandle NcclCommunicator::Watch(std::function<std::string()> describe) {
  CountDeviceWork(DeviceWork::kLaunch);  // the operation just enqueued
  cudaEvent_t raw_event;
  TETRA_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&raw_event, cudaEventDisableTiming));
  std::shared_ptr<std::remove_pointer_t<cudaEvent_t>> event(raw_event, cudaEventDestroy);
  TETRA_NCCL_CUDA_CHECK(cudaEventRecord(event.get(), stream_));
  ncclComm_t comm = comm_;
  auto poll = [comm, event] {
    ncclResult_t async_error = ncclSuccess;
    TETRA_NCCL_CHECK(Nccl().CommGetAsyncError(comm, &async_error));
    TETRA_CHECK(async_error == ncclSuccess)
        << "NCCL asynchronous error: " << Nccl().GetErrorString(async_error) << " ("
        << Nccl().GetLastError(comm) << ")";
    const cudaError_t state = cudaEventQuery(event.get());
    if (state == cudaErrorNotReady) return false;
    TETRA_NCCL_CUDA_CHECK(state);
    return true;
  };
  return CommHandle(std::move(poll), std::move(describe), timeout_s(),
                    [comm] { Nccl().CommAbort(comm); });
}

CommHandle NcclCommunicator::StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
  const ncclRedOp_t nccl_op = NcclOp(op, send.dtype(), "all_reduce");
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().AllReduce(send.raw(), recv.raw(), recv.numel(), NcclType(send.dtype()),
                                    nccl_op, comm_, stream_));
  return Watch([this, op, count = recv.numel(), dtype = recv.dtype()] {
    return DescribeOp(*this, OpWithReduction("all_reduce", op), count, dtype);
  });
}

CommHandle NcclCommunicator::StartReduceScatter(const Tensor& send, const Tensor& recv,
                                                ReduceOp op) {
  const ncclRedOp_t nccl_op = NcclOp(op, send.dtype(), "reduce_scatter");
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().ReduceScatter(send.raw(), recv.raw(), recv.numel(),
                                        NcclType(send.dtype()), nccl_op, comm_, stream_));
  return Watch([this, op, count = send.numel(), dtype = send.dtype()] {
    return DescribeOp(*this, OpWithReduction("reduce_scatter", op), count, dtype);
  });
}

CommHandle NcclCommunicator::StartAllGather(const Tensor& send, const Tensor& recv) {
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().AllGather(send.raw(), recv.raw(), send.numel(), NcclType(send.dtype()),
                                    comm_, stream_));
  return Watch([this, count = recv.numel(), dtype = recv.dtype()] {
    return DescribeOp(*this, "all_gather", count, dtype);
  });
}

void NcclCommunicator::EnqueueAllToAll(const Tensor& send, const std::vector<int64_t>& send_counts,
                                       const std::vector<int64_t>& send_offsets, const Tensor& recv,
                                       const std::vector<int64_t>& recv_counts,
                                       const std::vector<int64_t>& recv_offsets) {
  const ncclDataType_t type = NcclType(send.dtype());
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().GroupStart());
  for (int r = 0; r < size(); ++r) {
    // Both sides skip a zero block: my send_counts[r] is r's recv_counts[me].
    if (send_counts[r] > 0) {
      TETRA_NCCL_CHECK(Nccl().Send(ElementRange(send, send_offsets[r], send_counts[r]).raw(),
                                   send_counts[r], type, r, comm_, stream_));
    }
    if (recv_counts[r] > 0) {
      TETRA_NCCL_CHECK(Nccl().Recv(ElementRange(recv, recv_offsets[r], recv_counts[r]).raw(),
                                   recv_counts[r], type, r, comm_, stream_));
    }
  }
  TETRA_NCCL_CHECK(Nccl().GroupEnd());
}

CommHandle NcclCommunicator::StartAllToAll(const Tensor& send, const Tensor& recv) {
  const int64_t count = send.numel() / size();
  std::vector<int64_t> counts(size(), count), offsets(size());
  for (int r = 0; r < size(); ++r) offsets[r] = r * count;
  EnqueueAllToAll(send, counts, offsets, recv, counts, offsets);
  return Watch([this, count = send.numel(), dtype = send.dtype()] {
    return DescribeOp(*this, "all_to_all", count, dtype);
  });
}

CommHandle NcclCommunicator::StartAllToAllV(const Tensor& send,
                                            const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& send_offsets,
                                            const Tensor& recv,
                                            const std::vector<int64_t>& recv_counts,
                                            const std::vector<int64_t>& recv_offsets) {
  EnqueueAllToAll(send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) sent += send_counts[r], received += recv_counts[r];
  return Watch([this, sent, received, dtype = send.dtype()] {
    return DescribeOp(*this, "all_to_all_v", sent, dtype,
                      absl::StrCat("(", received, " received)"));
  });
}

CommHandle NcclCommunicator::StartBroadcast(const Tensor& buffer, int root) {
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().Broadcast(buffer.raw(), buffer.raw(), buffer.numel(),
                                    NcclType(buffer.dtype()), root, comm_, stream_));
  return Watch([this, count = buffer.numel(), dtype = buffer.dtype(), root] {
    return DescribeOp(*this, "broadcast", count, dtype, "from " + DescribeGroupRank(*this, root));
  });
}

CommHandle NcclCommunicator::StartSend(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag == 0) << "send: NCCL has no tags (got " << tag
                        << "); order the transfers instead";
  AfterCurrentStream();
  TETRA_NCCL_CHECK(
      Nccl().Send(buffer.raw(), buffer.numel(), NcclType(buffer.dtype()), peer, comm_, stream_));
  return Watch([this, count = buffer.numel(), dtype = buffer.dtype(), peer] {
    return DescribeOp(*this, "send", count, dtype, "to " + DescribeGroupRank(*this, peer));
  });
}

CommHandle NcclCommunicator::StartRecv(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag == 0) << "recv: NCCL has no tags (got " << tag
                        << "); order the transfers instead";
  AfterCurrentStream();
  TETRA_NCCL_CHECK(
      Nccl().Recv(buffer.raw(), buffer.numel(), NcclType(buffer.dtype()), peer, comm_, stream_));
  return Watch([this, count = buffer.numel(), dtype = buffer.dtype(), peer] {
    return DescribeOp(*this, "recv", count, dtype, "from " + DescribeGroupRank(*this, peer));
  });
}

CommHandle NcclCommunicator::StartSendRecv(const Tensor& send, int to, const Tensor& recv,
                                           int from) {
  AfterCurrentStream();
  TETRA_NCCL_CHECK(Nccl().GroupStart());
  TETRA_NCCL_CHECK(
      Nccl().Send(send.raw(), send.numel(), NcclType(send.dtype()), to, comm_, stream_));
  TETRA_NCCL_CHECK(
      Nccl().Recv(recv.raw(), recv.numel(), NcclType(recv.dtype()), from, comm_, stream_));
  TETRA_NCCL_CHECK(Nccl().GroupEnd());
  return Watch(
      [this, send, to, recv, from] { return DescribeSendRecv(*this, send, to, recv, from); });
}

CommHandle NcclCommunicator::StartBarrier() {
  AfterCurrentStream();
  TETRA_NCCL_CHECK(
      Nccl().AllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_));
  return Watch([this] { return absl::StrCat("barrier on ", DescribeGroup(*this)); });
}

std::unique_ptr<Communicator> NcclCommunicator::Split(const std::vector<int>& world_ranks,
                                                      const std::string& name) {
  std::unique_ptr<Communicator> host =
      host_->Split(world_ranks, name);  // collective over this group
  // A group of one moves nothing: no NCCL communicator (and its buffers) for it.
  if (host->size() == 1)
    return std::make_unique<SelfCommunicator>(host->ranks()[0], name, timeout_s());
  auto comm = std::make_unique<NcclCommunicator>(std::move(host), stream_);
  comm->own_stream_ = own_stream_;
  return comm;
}

}  // namespace tetra
