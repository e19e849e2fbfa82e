// What the Communicator checks about an operation before any backend sees it
// (overlap, rank ranges and blocks: fatal, since a bad buffer or rank is a
// bug in the caller), the views and layouts backends take blocks with, and
// the watchdog's description of an operation. One place, so MPI, NCCL and a
// group of one fail and speak the same way.
#ifndef TETRA_COMM_BACKEND_UTIL_H_
#define TETRA_COMM_BACKEND_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tetra {

// Elements [offset, offset + count) of `t`, flat, sharing its storage.
Tensor ElementRange(const Tensor& t, int64_t offset, int64_t count);
// Whether `block` is block comm.rank() of `whole` (blocks of block.numel()
// elements): the in-place layout of reduce-scatter and all-gather.
bool IsOwnBlock(const Communicator& comm, const Tensor& whole, const Tensor& block);

// Fatal unless the memory of `a` and `b` is disjoint.
void CheckDisjoint(const Tensor& a, const Tensor& b, const char* op);
// Fatal unless 0 <= rank < comm.size(); `role` is "peer" or "root".
void CheckGroupRank(const Communicator& comm, int rank, const char* role, const char* op);
// Fatal unless `counts` and `offsets` hold comm.size() entries, counts >= 0,
// offsets >= 0. Returns the buffer extent: max over r of offsets[r] + counts[r].
int64_t CheckBlocks(const Communicator& comm, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, const char* what);

// "all_reduce (sum) of 1024 F32 on group dp (world ranks 1, 3)"; `detail`
// (e.g. "to rank 1 (world 3), tag 0") goes before the group.
std::string DescribeOp(const Communicator& comm, const std::string& op, int64_t count, DType dtype,
                       const std::string& detail = "");
// "rank 1 (world 3)"
std::string DescribeGroupRank(const Communicator& comm, int rank);
// "send_recv of 8 F32 to rank 1 (world 1), from rank 1 (world 1), on group ..."
std::string DescribeSendRecv(const Communicator& comm, const Tensor& send, int to,
                             const Tensor& recv, int from);

// A handle complete once both `a` and `b` are (a send and a receive posted together).
CommHandle Both(CommHandle a, CommHandle b, std::function<std::string()> describe,
                double timeout_s);

}  // namespace tetra

#endif  // TETRA_COMM_BACKEND_UTIL_H_
