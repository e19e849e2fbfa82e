// Helper program for staged_rules_test (not a test itself): a 2-rank MPI job
// on the staged communicator that breaks one of NCCL's rules, named by
// argv[1], which the staged backend must refuse, ending the job:
//   order   rank 0 all-reduces where rank 1 all-gathers;
//   size    the ranks all-reduce different numbers of elements;
//   counts  rank 1 expects more all-to-all-v elements than rank 0 sends it;
//   tag     rank 0 sends with tag 5;
//   self    each rank posts a lone send to itself (NCCL refuses it);
//   sends_first     each rank posts a lone send to the other, then its
//                   receive (NCCL deadlocks: each send waits for a receive
//                   queued behind the other's send);
//   receives_first  each rank posts a lone receive from the other, then its
//                   send (tetra commbench's old send_recv: NCCL deadlocks).
// The two deadlocks end through the watchdog, after a short comm timeout.
// A rule it failed to catch ends in "not refused" and exit 0.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"

namespace tetra {
namespace {

Tensor F32(std::vector<float>& v) {
  return Tensor::View(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32);
}

void BreakRule(const std::string& rule, Communicator& comm) {
  const int me = comm.rank();
  std::vector<float> a(8, 1.0f), b(16, 0.0f);
  if (rule == "order") {
    if (me == 0)
      comm.AllReduce(F32(a), F32(a), ReduceOp::kSum);
    else
      comm.AllGather(F32(a), F32(b));
  } else if (rule == "size") {
    std::vector<float> mine(me == 0 ? 8 : 9, 1.0f);
    comm.AllReduce(F32(mine), F32(mine), ReduceOp::kSum);
  } else if (rule == "counts") {
    // Rank 0 sends rank 1 two elements; rank 1 expects three.
    const std::vector<int64_t> send_counts = {1, 2}, send_offsets = {0, 1};
    const std::vector<int64_t> recv_counts =
        me == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 2};
    const std::vector<int64_t> recv_offsets = {0, 3};
    comm.AllToAllV(F32(a), send_counts, send_offsets, F32(b), recv_counts, recv_offsets);
  } else if (rule == "tag") {
    if (me == 0)
      comm.Send(F32(a), 1, /*tag=*/5);
    else
      comm.Recv(F32(a), 0, /*tag=*/0);
  } else if (rule == "self") {
    comm.Send(F32(a), me);
  } else if (rule == "sends_first" || rule == "receives_first") {
    const int other = 1 - me;
    CommHandle first = rule == "sends_first" ? comm.SendAsync(F32(a), other)
                                             : comm.RecvAsync(F32(b).Slice(0, 8), other);
    CommHandle second = rule == "sends_first" ? comm.RecvAsync(F32(b).Slice(0, 8), other)
                                              : comm.SendAsync(F32(a), other);
    first.Wait();  // the watchdog names the call posted first
    second.Wait();
  }
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) {
  tetra::MpiSession session(&argc, &argv);
  const std::string rule = argc > 1 ? argv[1] : "";
  // The deadlocks end when this passes; the other rules are caught at once.
  const double timeout_s = rule == "sends_first" || rule == "receives_first" ? 3 : 60;
  tetra::StagedCommunicator staged(tetra::MpiWorld(timeout_s));
  tetra::BreakRule(rule, staged);
  std::printf("rank %d: rule %s not refused\n", staged.rank(), argc > 1 ? argv[1] : "(none)");
  return 0;
}
