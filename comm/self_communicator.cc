#include "comm/self_communicator.h"

#include <utility>

#include "comm/backend_util.h"
#include "core/logging.h"

namespace tetra {
namespace {

// The one-rank result of every data-moving collective: recv = send.
CommHandle Copy(const Tensor& send, const Tensor& recv) {
  if (send.raw() != recv.raw()) recv.CopyFrom(send);
  return CommHandle();
}

CommHandle NoPeer(const char* op) {
  TETRA_CHECK(false) << op << " reached a single-rank group's backend, which has no peer";
  return CommHandle();
}

}  // namespace

SelfCommunicator::SelfCommunicator(int world_rank, std::string name, double timeout_s)
    : name_(std::move(name)), ranks_{world_rank}, timeout_s_(timeout_s) {}

// Sum, max and mean of one value.
CommHandle SelfCommunicator::StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp) {
  return Copy(send, recv);
}

CommHandle SelfCommunicator::StartReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp) {
  return Copy(send, recv);
}

CommHandle SelfCommunicator::StartAllGather(const Tensor& send, const Tensor& recv) {
  return Copy(send, recv);
}

CommHandle SelfCommunicator::StartAllToAll(const Tensor& send, const Tensor& recv) {
  return Copy(send, recv);
}

CommHandle SelfCommunicator::StartAllToAllV(const Tensor& send,
                                            const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& send_offsets,
                                            const Tensor& recv,
                                            const std::vector<int64_t>& recv_counts,
                                            const std::vector<int64_t>& recv_offsets) {
  TETRA_CHECK(send_counts[0] == recv_counts[0])
      << "all_to_all_v on one rank: sends " << send_counts[0] << " elements to itself but expects "
      << recv_counts[0];
  return Copy(ElementRange(send, send_offsets[0], send_counts[0]),
              ElementRange(recv, recv_offsets[0], recv_counts[0]));
}

CommHandle SelfCommunicator::StartBroadcast(const Tensor&, int) { return CommHandle(); }

// Unreachable: the only peer is this rank, which Communicator refuses for a
// lone send or receive and serves itself for a send_recv.
CommHandle SelfCommunicator::StartSend(const Tensor&, int, int) { return NoPeer("send"); }
CommHandle SelfCommunicator::StartRecv(const Tensor&, int, int) { return NoPeer("recv"); }
CommHandle SelfCommunicator::StartSendRecv(const Tensor&, int, const Tensor&, int) {
  return NoPeer("send_recv");
}

CommHandle SelfCommunicator::StartBarrier() { return CommHandle(); }

std::unique_ptr<Communicator> SelfCommunicator::Split(const std::vector<int>& world_ranks,
                                                      const std::string& name) {
  TETRA_CHECK(world_ranks == ranks_)
      << "split of single-rank " << DescribeGroup(*this) << " into a group of "
      << world_ranks.size() << " ranks: it can only hold this rank";
  return std::make_unique<SelfCommunicator>(ranks_[0], name, timeout_s_);
}

}  // namespace tetra
