// SelfCommunicator: a Communicator whose group is this process alone, for
// single-process runs and for size-1 axes of a layout (tp = 1, dp = 1), on
// either device. Every collective over one rank is a copy from send to recv
// (Tensor::CopyFrom; nothing when in place), broadcast and barrier do
// nothing, and every handle it returns is already complete, so code written
// for a group runs unchanged and free of transfers. A send_recv with oneself
// is a copy (Communicator does it); a lone send or receive to oneself is
// refused before it reaches this backend.
#ifndef TETRA_COMM_SELF_COMMUNICATOR_H_
#define TETRA_COMM_SELF_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tetra {

class SelfCommunicator : public Communicator {
 public:
  // Default deadline: SelfCommunicator never waits, so it only names a value
  // for callers that read timeout_s().
  static constexpr double kDefaultTimeoutS = 600;

  // `world_rank`: this process's rank in the job (ranks() = {world_rank}).
  explicit SelfCommunicator(int world_rank = 0, std::string name = "self",
                            double timeout_s = kDefaultTimeoutS);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& ranks() const override { return ranks_; }
  double timeout_s() const override { return timeout_s_; }
  bool Serves(DeviceType) const override { return true; }

  // `world_ranks` must be {this world rank}; returns another SelfCommunicator.
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
  std::string name_;
  std::vector<int> ranks_;
  double timeout_s_;
};

}  // namespace tetra

#endif  // TETRA_COMM_SELF_COMMUNICATOR_H_
