// What every Communicator backend checks and says about an operation: byte
// addressing of typed buffers, overlap and rank-range checks (fatal: a bad
// buffer or rank is a bug in the caller), and the watchdog's description of
// the operation. Backends share these so MPI and NCCL fail the same way.
#ifndef TETRA_COMM_BACKEND_UTIL_H_
#define TETRA_COMM_BACKEND_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tetra {

// Address of element `index` of a `dtype` buffer.
inline char* ElementPtr(const void* base, int64_t index, DType dtype) {
  return static_cast<char*>(const_cast<void*>(base)) + index * static_cast<int64_t>(DTypeSize(dtype));
}

// Fatal unless [a, a + a_bytes) and [b, b + b_bytes) are disjoint.
void CheckDisjoint(const void* a, size_t a_bytes, const void* b, size_t b_bytes, const char* op);
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

}  // namespace tetra

#endif  // TETRA_COMM_BACKEND_UTIL_H_
