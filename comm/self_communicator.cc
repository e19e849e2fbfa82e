#include "comm/self_communicator.h"

#include <cstring>
#include <utility>

#include "comm/backend_util.h"
#include "core/logging.h"

namespace tetra {
namespace {

// The one-rank result of every data-moving collective: recv = send.
void CopyBlock(const void* send, void* recv, int64_t count, DType dtype, const char* op) {
  TETRA_CHECK(count >= 0) << op << ": negative count " << count;
  if (send == recv || count == 0) return;
  const size_t bytes = count * DTypeSize(dtype);
  CheckDisjoint(send, bytes, recv, bytes, op);
  std::memcpy(recv, send, bytes);
}

}  // namespace

SelfCommunicator::SelfCommunicator(int world_rank, std::string name, double timeout_s)
    : name_(std::move(name)), ranks_{world_rank}, timeout_s_(timeout_s) {}

CommHandle SelfCommunicator::AllReduceAsync(const void* send, void* recv, int64_t count,
                                            DType dtype, ReduceOp) {
  CopyBlock(send, recv, count, dtype, "all_reduce");  // sum, max and mean of one value
  return CommHandle();
}

CommHandle SelfCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                DType dtype, ReduceOp) {
  CopyBlock(send, recv, recv_count, dtype, "reduce_scatter");
  return CommHandle();
}

CommHandle SelfCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                            DType dtype) {
  CopyBlock(send, recv, send_count, dtype, "all_gather");
  return CommHandle();
}

CommHandle SelfCommunicator::AllToAllAsync(const void* send, void* recv, int64_t count,
                                           DType dtype) {
  const size_t bytes = count * DTypeSize(dtype);
  CheckDisjoint(send, bytes, recv, bytes, "all_to_all");  // no in-place form
  CopyBlock(send, recv, count, dtype, "all_to_all");
  return CommHandle();
}

CommHandle SelfCommunicator::AllToAllVAsync(const void* send,
                                            const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& send_offsets, void* recv,
                                            const std::vector<int64_t>& recv_counts,
                                            const std::vector<int64_t>& recv_offsets,
                                            DType dtype) {
  CheckBlocks(*this, send_counts, send_offsets, "send");
  CheckBlocks(*this, recv_counts, recv_offsets, "recv");
  CheckDisjoint(ElementPtr(send, send_offsets[0], dtype), send_counts[0] * DTypeSize(dtype),
                ElementPtr(recv, recv_offsets[0], dtype), recv_counts[0] * DTypeSize(dtype),
                "all_to_all_v");
  TETRA_CHECK(send_counts[0] == recv_counts[0])
      << "all_to_all_v on one rank: sends " << send_counts[0] << " elements to itself but expects "
      << recv_counts[0];
  CopyBlock(ElementPtr(send, send_offsets[0], dtype), ElementPtr(recv, recv_offsets[0], dtype),
            send_counts[0], dtype, "all_to_all_v");
  return CommHandle();
}

CommHandle SelfCommunicator::BroadcastAsync(void*, int64_t, DType, int root) {
  CheckGroupRank(*this, root, "root", "broadcast");
  return CommHandle();
}

CommHandle SelfCommunicator::SendAsync(const void*, int64_t count, DType dtype, int peer, int tag) {
  TETRA_CHECK(false) << DescribeOp(*this, "send", count, dtype) << " to rank " << peer << ", tag "
                     << tag << ": a single-rank group has no peer to send to";
  return CommHandle();
}

CommHandle SelfCommunicator::RecvAsync(void*, int64_t count, DType dtype, int peer, int tag) {
  TETRA_CHECK(false) << DescribeOp(*this, "recv", count, dtype) << " from rank " << peer
                     << ", tag " << tag << ": a single-rank group has no peer to receive from";
  return CommHandle();
}

CommHandle SelfCommunicator::BarrierAsync() { return CommHandle(); }

std::unique_ptr<Communicator> SelfCommunicator::Split(const std::vector<int>& world_ranks,
                                                      const std::string& name) {
  TETRA_CHECK(world_ranks == ranks_)
      << "split of single-rank " << DescribeGroup(*this) << " into a group of "
      << world_ranks.size() << " ranks: it can only hold this rank";
  return std::make_unique<SelfCommunicator>(ranks_[0], name, timeout_s_);
}

}  // namespace tetra
