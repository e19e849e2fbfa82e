#include "comm/cuda/nccl_communicator.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/backend_util.h"
#include "core/logging.h"

// Failed CUDA and NCCL calls are broken invariants: fatal, with file:line.
#define TETRA_NCCL_CUDA_CHECK(call)                                                        \
  do {                                                                                     \
    const cudaError_t tetra_cuda_rc = (call);                                              \
    TETRA_CHECK(tetra_cuda_rc == cudaSuccess) << #call << ": " << cudaGetErrorString(tetra_cuda_rc); \
  } while (0)
#define TETRA_NCCL_CHECK(call)                                                        \
  do {                                                                                \
    const ncclResult_t tetra_nccl_rc = (call);                                        \
    TETRA_CHECK(tetra_nccl_rc == ncclSuccess)                                         \
        << #call << ": " << ncclGetErrorString(tetra_nccl_rc) << " (" << ncclGetLastError(nullptr) << ")"; \
  } while (0)

namespace tetra {
namespace {

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kF64: return ncclFloat64;
  }
  TETRA_CHECK(false) << "unknown dtype";
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op, DType dtype, const char* op_name) {
  TETRA_CHECK(op != ReduceOp::kMean || dtype != DType::kI32)
      << op_name << ": mean of I32 is not defined (integer division); reduce with sum";
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMean: return ncclAvg;
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
  if (host_->rank() == 0) TETRA_NCCL_CHECK(ncclGetUniqueId(&id));
  host_->Broadcast(&id, sizeof(id) / sizeof(int32_t), DType::kI32, 0);
  TETRA_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
  TETRA_NCCL_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int)));
  TETRA_NCCL_CUDA_CHECK(cudaMemsetAsync(barrier_word_, 0, sizeof(int), stream_));
}

NcclCommunicator::~NcclCommunicator() {
  ncclCommDestroy(comm_);
  cudaFree(barrier_word_);
}

CommHandle NcclCommunicator::Watch(std::function<std::string()> describe) {
  cudaEvent_t raw_event;
  TETRA_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&raw_event, cudaEventDisableTiming));
  std::shared_ptr<std::remove_pointer_t<cudaEvent_t>> event(raw_event, cudaEventDestroy);
  TETRA_NCCL_CUDA_CHECK(cudaEventRecord(event.get(), stream_));
  ncclComm_t comm = comm_;
  auto poll = [comm, event] {
    ncclResult_t async_error = ncclSuccess;
    TETRA_NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error));
    TETRA_CHECK(async_error == ncclSuccess) << "NCCL asynchronous error: "
                                           << ncclGetErrorString(async_error) << " ("
                                           << ncclGetLastError(comm) << ")";
    const cudaError_t state = cudaEventQuery(event.get());
    if (state == cudaErrorNotReady) return false;
    TETRA_NCCL_CUDA_CHECK(state);
    return true;
  };
  return CommHandle(std::move(poll), std::move(describe), timeout_s(), [comm] { ncclCommAbort(comm); });
}

CommHandle NcclCommunicator::AllReduceAsync(const void* send, void* recv, int64_t count, DType dtype,
                                            ReduceOp op) {
  const ncclRedOp_t nccl_op = NcclOp(op, dtype, "all_reduce");
  const size_t bytes = count * DTypeSize(dtype);
  if (send != recv) CheckDisjoint(send, bytes, recv, bytes, "all_reduce");
  TETRA_NCCL_CHECK(ncclAllReduce(send, recv, count, NcclType(dtype), nccl_op, comm_, stream_));
  return Watch([this, op, count, dtype] {
    return DescribeOp(*this, OpWithReduction("all_reduce", op), count, dtype);
  });
}

CommHandle NcclCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                DType dtype, ReduceOp op) {
  const ncclRedOp_t nccl_op = NcclOp(op, dtype, "reduce_scatter");
  const size_t block_bytes = recv_count * DTypeSize(dtype);
  if (recv != ElementPtr(send, rank() * recv_count, dtype)) {
    CheckDisjoint(send, block_bytes * size(), recv, block_bytes, "reduce_scatter");
  }
  TETRA_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, NcclType(dtype), nccl_op, comm_, stream_));
  return Watch([this, op, recv_count, dtype] {
    return DescribeOp(*this, OpWithReduction("reduce_scatter", op), recv_count * size(), dtype);
  });
}

CommHandle NcclCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                            DType dtype) {
  const size_t block_bytes = send_count * DTypeSize(dtype);
  if (send != ElementPtr(recv, rank() * send_count, dtype)) {
    CheckDisjoint(send, block_bytes, recv, block_bytes * size(), "all_gather");
  }
  TETRA_NCCL_CHECK(ncclAllGather(send, recv, send_count, NcclType(dtype), comm_, stream_));
  return Watch([this, send_count, dtype] {
    return DescribeOp(*this, "all_gather", send_count * size(), dtype);
  });
}

void NcclCommunicator::EnqueueAllToAll(const void* send, const std::vector<int64_t>& send_counts,
                                       const std::vector<int64_t>& send_offsets, void* recv,
                                       const std::vector<int64_t>& recv_counts,
                                       const std::vector<int64_t>& recv_offsets, DType dtype) {
  const int64_t send_extent = CheckBlocks(*this, send_counts, send_offsets, "send");
  const int64_t recv_extent = CheckBlocks(*this, recv_counts, recv_offsets, "recv");
  CheckDisjoint(send, send_extent * DTypeSize(dtype), recv, recv_extent * DTypeSize(dtype),
                "all_to_all");
  const ncclDataType_t type = NcclType(dtype);
  TETRA_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size(); ++r) {
    // Both sides skip a zero block: my send_counts[r] is r's recv_counts[me].
    if (send_counts[r] > 0) {
      TETRA_NCCL_CHECK(ncclSend(ElementPtr(send, send_offsets[r], dtype), send_counts[r], type, r,
                                comm_, stream_));
    }
    if (recv_counts[r] > 0) {
      TETRA_NCCL_CHECK(ncclRecv(ElementPtr(recv, recv_offsets[r], dtype), recv_counts[r], type, r,
                                comm_, stream_));
    }
  }
  TETRA_NCCL_CHECK(ncclGroupEnd());
}

CommHandle NcclCommunicator::AllToAllAsync(const void* send, void* recv, int64_t count, DType dtype) {
  std::vector<int64_t> counts(size(), count), offsets(size());
  for (int r = 0; r < size(); ++r) offsets[r] = r * count;
  EnqueueAllToAll(send, counts, offsets, recv, counts, offsets, dtype);
  return Watch([this, count, dtype] { return DescribeOp(*this, "all_to_all", count * size(), dtype); });
}

CommHandle NcclCommunicator::AllToAllVAsync(const void* send, const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& send_offsets, void* recv,
                                            const std::vector<int64_t>& recv_counts,
                                            const std::vector<int64_t>& recv_offsets, DType dtype) {
  EnqueueAllToAll(send, send_counts, send_offsets, recv, recv_counts, recv_offsets, dtype);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) sent += send_counts[r], received += recv_counts[r];
  return Watch([this, sent, received, dtype] {
    return DescribeOp(*this, "all_to_all_v", sent, dtype, absl::StrCat("(", received, " received)"));
  });
}

CommHandle NcclCommunicator::BroadcastAsync(void* buffer, int64_t count, DType dtype, int root) {
  CheckGroupRank(*this, root, "root", "broadcast");
  TETRA_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, NcclType(dtype), root, comm_, stream_));
  return Watch([this, count, dtype, root] {
    return DescribeOp(*this, "broadcast", count, dtype, "from " + DescribeGroupRank(*this, root));
  });
}

CommHandle NcclCommunicator::SendAsync(const void* buffer, int64_t count, DType dtype, int peer,
                                       int tag) {
  CheckGroupRank(*this, peer, "peer", "send");
  TETRA_CHECK(tag == 0) << "send: NCCL has no tags (got " << tag << "); order the transfers instead";
  TETRA_NCCL_CHECK(ncclSend(buffer, count, NcclType(dtype), peer, comm_, stream_));
  return Watch([this, count, dtype, peer] {
    return DescribeOp(*this, "send", count, dtype, "to " + DescribeGroupRank(*this, peer));
  });
}

CommHandle NcclCommunicator::RecvAsync(void* buffer, int64_t count, DType dtype, int peer, int tag) {
  CheckGroupRank(*this, peer, "peer", "recv");
  TETRA_CHECK(tag == 0) << "recv: NCCL has no tags (got " << tag << "); order the transfers instead";
  TETRA_NCCL_CHECK(ncclRecv(buffer, count, NcclType(dtype), peer, comm_, stream_));
  return Watch([this, count, dtype, peer] {
    return DescribeOp(*this, "recv", count, dtype, "from " + DescribeGroupRank(*this, peer));
  });
}

CommHandle NcclCommunicator::BarrierAsync() {
  TETRA_NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_));
  return Watch([this] { return absl::StrCat("barrier on ", DescribeGroup(*this)); });
}

std::unique_ptr<Communicator> NcclCommunicator::Split(const std::vector<int>& world_ranks,
                                                      const std::string& name) {
  return std::make_unique<NcclCommunicator>(host_->Split(world_ranks, name), stream_);
}

}  // namespace tetra
