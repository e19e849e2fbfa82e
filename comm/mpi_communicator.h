// MPI backend: a Communicator over an MPI communicator, on host memory.
// Every operation is MPI's non-blocking form (MPI_Iallreduce, MPI_Isend, ...)
// and its handle polls MPI_Test, so CommHandle::Wait's watchdog covers it.
// MpiSession owns MPI's lifetime and makes a timed-out wait end the job with
// MPI_Abort; MpiWorld gives the communicator of all ranks, Split the groups.
//
// Host tensors only. Reductions take F32 and I32 (kMean: F32 only; the
// Communicator widens BF16 and F16 to F32 first); F64 and every other dtype
// move through the non-reducing operations. MPI counts are ints: a count or offset
// beyond INT_MAX elements is a fatal check. MPI moves a non-blocking
// collective forward only inside MPI calls, so to overlap a long transfer with
// compute, call Test() on its handle between chunks of the compute.
#ifndef TETRA_COMM_MPI_COMMUNICATOR_H_
#define TETRA_COMM_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_liveness.h"

namespace tetra {

// Initialises MPI with MPI_THREAD_FUNNELED for its lifetime (unless MPI is
// already initialised), makes MPI errors fatal checks with file:line, sets the
// log rank, installs MPI_Abort(MPI_COMM_WORLD) as the comm abort handler and
// the liveness probe (mpi_liveness.h) as the wait hooks.
// One per process, usually in main().
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();  // finalises MPI if this session initialised it
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool initialised_here_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  std::function<void()> previous_abort_handler_;
  std::unique_ptr<MpiLiveness> liveness_;
  WaitHooks previous_wait_hooks_;
};

// All ranks, named "world", on a duplicate of MPI_COMM_WORLD (so tetra's
// traffic never matches anyone else's). Needs a live MpiSession.
std::unique_ptr<Communicator> MpiWorld(double timeout_s);

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction); `world_ranks` lists the
  // world rank of each of its ranks.
  MpiCommunicator(MPI_Comm comm, std::string name, std::vector<int> world_ranks, double timeout_s);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  const std::string& name() const override { return name_; }
  const std::vector<int>& ranks() const override { return world_ranks_; }
  double timeout_s() const override { return timeout_s_; }
  bool Serves(DeviceType device) const override { return device == DeviceType::kCPU; }
  MPI_Comm comm() const { return comm_; }

  // Every rank of this communicator names its own group; the groups must
  // partition this communicator's ranks, and every rank must agree on them
  // (checked: a rank whose view differs gets a fatal check naming both views).
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
  struct Pending;
  // The handle of a started request; `finish` runs once it has completed.
  CommHandle Watch(std::shared_ptr<Pending> pending, std::function<std::string()> describe);

  MPI_Comm comm_;
  std::string name_;
  std::vector<int> world_ranks_;
  double timeout_s_;
  int rank_ = 0;
};

}  // namespace tetra

#endif  // TETRA_COMM_MPI_COMMUNICATOR_H_
