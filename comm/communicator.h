// Communicator: the one interface every parallel feature talks through.
// Collectives and point-to-point transfers over a group of ranks, each in a
// non-blocking form that returns a CommHandle (so compute can overlap the
// transfer) and a blocking form that waits on it. Backends: MPI over host
// memory (mpi_communicator.h), NCCL over device memory (nccl_communicator.h)
// and a group of one (self_communicator.h).
//
// Nothing waits forever: every Wait has the communicator's deadline
// (parallel.comm_timeout_s). When it passes, the job ends with a message
// naming the operation, the group and the waiting rank, and a non-zero exit
// for every rank (abort, not hang).
//
// Buffers are Tensors: the dtype and device come from them, the same for
// every tensor of one call, and the backend must serve that device (Serves).
// Host scalars and vectors travel as Tensor::View. Counts and offsets are
// elements, not bytes, and may be 0. Reductions of BF16 and F16 accumulate in
// F32: the tensors are widened to F32 temporaries, reduced, and narrowed into
// recv when the operation completes. In place: `send` and `recv` at the same
// address for all-reduce; for reduce-scatter and all-gather the tensor of
// size() blocks is used in place when this rank's block is the small tensor
// (recv at send + rank() x recv.numel() elements, send at recv + rank() x
// send.numel()), as NCCL defines it. All-to-all buffers must not overlap. Any
// other overlap is a fatal check, as are mismatched dtypes, devices and
// sizes. Tensors stay valid until their operation completes. Calls (and
// Wait/Test) come from one thread, the one that created the communicator.
#ifndef TETRA_COMM_COMMUNICATOR_H_
#define TETRA_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace tetra {

// kMean is the sum divided by the group size (floating types only).
enum class ReduceOp { kSum, kMax, kMean };

// A pending operation. Wait() returns when it has completed, or ends the job
// when the deadline passes first. Move-only; waiting twice is a no-op.
class CommHandle {
 public:
  // `poll` returns true once the operation has completed; `describe` names it
  // for the timeout message ("all_reduce (sum) of 1024 F32 on group dp (world
  // ranks 1, 3)"); `on_timeout`, when set, runs before the job is ended (NCCL
  // aborts its communicator there). A default-constructed handle is complete.
  CommHandle() = default;
  CommHandle(std::function<bool()> poll, std::function<std::string()> describe, double timeout_s,
             std::function<void()> on_timeout = nullptr);
  // A moved-from handle is complete; assigning over a pending handle waits on it first.
  CommHandle(CommHandle&& other) noexcept;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();  // an unwaited pending handle is a bug: it is waited on here

  // Polls (spinning, then sleeping up to 1 ms) until done; after timeout_s
  // seconds prints which rank waited for what to stderr and ends the job.
  void Wait();
  bool Test();  // true once complete (never blocks)

  // A handle that completes once this one has and `after` has run (once, on
  // the thread that waits or tests; at once when this one is complete).
  // Consumes this handle; keeps its description, deadline and on_timeout.
  CommHandle Then(std::function<void()> after) &&;

 private:
  std::function<bool()> poll_;
  std::function<std::string()> describe_;
  std::function<void()> on_timeout_;
  double timeout_s_ = 0;
  bool done_ = true;
};

// What a timed-out Wait calls, after printing its message, to end every rank
// of the job; it should not return (if it does, the process exits with 1).
// The default exits this process with 1; the MPI backend installs MPI_Abort.
// Returns the handler it replaced.
std::function<void()> SetCommAbortHandler(std::function<void()> handler);

// What waits ask of the job's backend (MpiSession installs its liveness
// probe, comm/mpi_liveness.h): `while_sleeping` runs between a wait's sleeps
// (answering other ranks' probes); `missing_ranks` runs when a wait times out
// and returns which ranks did not answer, with their hosts ("" when all did).
struct WaitHooks {
  std::function<void()> while_sleeping;
  std::function<std::string()> missing_ranks;
};
// Installs `hooks` for every wait of this process; returns those it replaced.
WaitHooks SetWaitHooks(WaitHooks hooks);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  // e.g. "dp" for the data-parallel group; "world" for all ranks.
  virtual const std::string& name() const = 0;
  // The world ranks of this group, ascending; ranks()[rank()] is this process.
  virtual const std::vector<int>& ranks() const = 0;
  virtual double timeout_s() const = 0;
  // Whether this backend moves tensors on `device` (MPI: host, NCCL: device).
  virtual bool Serves(DeviceType device) const = 0;
  // Where host tensors go when this backend does not serve the host: the MPI
  // group a device backend was bootstrapped over (NCCL), so a group's host
  // scalars (a loss, a status, counts) and its device tensors travel through
  // one Communicator and code above comm/ never picks a backend. Null: none.
  virtual Communicator* host_route() const { return nullptr; }

  // recv = op over ranks of send (equal numel).
  CommHandle AllReduceAsync(const Tensor& send, const Tensor& recv, ReduceOp op);
  // send holds size() x recv.numel() elements; rank r receives the reduction of block r.
  CommHandle ReduceScatterAsync(const Tensor& send, const Tensor& recv, ReduceOp op);
  // recv holds size() x send.numel() elements: block r is rank r's send.
  CommHandle AllGatherAsync(const Tensor& send, const Tensor& recv);
  // Equal numel, size() blocks: block r of send goes to rank r; block r of
  // recv came from rank r.
  CommHandle AllToAllAsync(const Tensor& send, const Tensor& recv);
  // Variable blocks: send_counts[r] elements at send_offsets[r] go to rank r;
  // recv_counts[r] elements from rank r land at recv_offsets[r].
  CommHandle AllToAllVAsync(const Tensor& send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_offsets, const Tensor& recv,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_offsets);
  // `root` is a rank of this group.
  CommHandle BroadcastAsync(const Tensor& buffer, int root);
  // Point-to-point with group rank `peer`. MPI matches by tag; NCCL has no
  // tags (it takes only tag 0) and matches a peer's messages in issue order,
  // so portable code sends and receives in the same order. NCCL runs a
  // communicator's calls one after another in posting order, a send ending
  // only once its receiver has reached the matching receive, so two ranks
  // that each post a lone send to the other before their receives deadlock:
  // exchanges go through SendRecvAsync. `peer` is never this rank itself
  // (NCCL refuses a lone send or receive to oneself; checked here for every
  // backend).
  CommHandle SendAsync(const Tensor& buffer, int peer, int tag = 0);
  CommHandle RecvAsync(const Tensor& buffer, int peer, int tag = 0);
  // Sends `send` to group rank `to` and receives `recv` (same dtype and
  // device, disjoint) from group rank `from` as one group, as NCCL's
  // ncclGroupStart/ncclGroupEnd pair them: the two progress together, so a
  // neighbour exchange cannot deadlock whatever order the ranks post in.
  // `to` and `from` are both this rank (a copy) or both another.
  CommHandle SendRecvAsync(const Tensor& send, int to, const Tensor& recv, int from);
  CommHandle BarrierAsync() { return StartBarrier(); }

  // A communicator over `world_ranks` (ascending, containing this rank), named
  // `name`. Collective over this communicator: every member calls it, in the
  // same order; ranks not in `world_ranks` call it with the group they belong to.
  virtual std::unique_ptr<Communicator> Split(const std::vector<int>& world_ranks,
                                              const std::string& name) = 0;

  // Blocking forms.
  void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
    AllReduceAsync(send, recv, op).Wait();
  }
  void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
    ReduceScatterAsync(send, recv, op).Wait();
  }
  void AllGather(const Tensor& send, const Tensor& recv) { AllGatherAsync(send, recv).Wait(); }
  void AllToAll(const Tensor& send, const Tensor& recv) { AllToAllAsync(send, recv).Wait(); }
  void AllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts,
                 const std::vector<int64_t>& send_offsets, const Tensor& recv,
                 const std::vector<int64_t>& recv_counts,
                 const std::vector<int64_t>& recv_offsets) {
    AllToAllVAsync(send, send_counts, send_offsets, recv, recv_counts, recv_offsets).Wait();
  }
  void Broadcast(const Tensor& buffer, int root) { BroadcastAsync(buffer, root).Wait(); }
  void Send(const Tensor& buffer, int peer, int tag = 0) { SendAsync(buffer, peer, tag).Wait(); }
  void Recv(const Tensor& buffer, int peer, int tag = 0) { RecvAsync(buffer, peer, tag).Wait(); }
  void SendRecv(const Tensor& send, int to, const Tensor& recv, int from) {
    SendRecvAsync(send, to, recv, from).Wait();
  }
  void Barrier() { BarrierAsync().Wait(); }

 protected:
  // What a backend implements, called with tensors already checked: one
  // dtype and a served device per call, sizes that fit the operation,
  // disjoint or in-place buffers, ranks of this group, blocks inside their
  // tensors. Reductions come in F32, I32 or F64 only (BF16 and F16 are
  // widened first).
  virtual CommHandle StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  virtual CommHandle StartReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  virtual CommHandle StartAllGather(const Tensor& send, const Tensor& recv) = 0;
  virtual CommHandle StartAllToAll(const Tensor& send, const Tensor& recv) = 0;
  virtual CommHandle StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_offsets, const Tensor& recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_offsets) = 0;
  virtual CommHandle StartBroadcast(const Tensor& buffer, int root) = 0;
  virtual CommHandle StartSend(const Tensor& buffer, int peer, int tag) = 0;
  virtual CommHandle StartRecv(const Tensor& buffer, int peer, int tag) = 0;
  // `to` and `from` are another rank (both this one: the caller copies).
  virtual CommHandle StartSendRecv(const Tensor& send, int to, const Tensor& recv, int from) = 0;
  virtual CommHandle StartBarrier() = 0;

 private:
  // host_route() when `t` is a host tensor this backend does not serve, else null.
  Communicator* HostRouteFor(const Tensor& t) const;
};

const char* ReduceOpName(ReduceOp op);

// The sum of every rank's `value`, added in rank order, so every rank gets
// the same bits (a loss or a squared norm): the values are gathered as F64,
// not reduced (MPI reduces only F32 and I32, and its order is its own).
double SumOverRanks(Communicator& group, double value);
// The largest of every rank's `value` (e.g. the peak memory of any rank).
double MaxOverRanks(Communicator& group, double value);

// Every rank's `mine` (any bytes), by rank, on every rank.
std::vector<std::string> AllGatherStrings(Communicator& group, const std::string& mine);

// Every rank of `group` ends with an error when any rank had one: its own
// `status`, or one naming the first failed rank. Collective over `group`, so a
// failure on one rank never leaves the others waiting in a later collective.
absl::Status AgreeOnStatus(Communicator& group, absl::Status status);

// "group dp (world ranks 1, 3)": how timeout messages name a group (long rank
// lists are shortened).
std::string DescribeGroup(const Communicator& comm);

}  // namespace tetra

#endif  // TETRA_COMM_COMMUNICATOR_H_
