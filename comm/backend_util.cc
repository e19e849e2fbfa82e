#include "comm/backend_util.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace tetra {

Tensor ElementRange(const Tensor& t, int64_t offset, int64_t count) {
  return t.Reshape({t.numel()}).Slice(offset, offset + count);
}

bool IsOwnBlock(const Communicator& comm, const Tensor& whole, const Tensor& block) {
  return block.raw() == static_cast<char*>(whole.raw()) + comm.rank() * block.nbytes();
}

void CheckDisjoint(const Tensor& a, const Tensor& b, const char* op) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.raw()), b0 = reinterpret_cast<uintptr_t>(b.raw());
  const size_t a_bytes = a.nbytes(), b_bytes = b.nbytes();
  const bool overlap = a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
  TETRA_CHECK(!overlap) << op << ": send and recv buffers overlap (" << a_bytes << " bytes at "
                        << a.raw() << ", " << b_bytes << " bytes at " << b.raw()
                        << ") without being the in-place layout (see comm/communicator.h)";
}

void CheckGroupRank(const Communicator& comm, int rank, const char* role, const char* op) {
  TETRA_CHECK(rank >= 0 && rank < comm.size())
      << op << ": " << role << " " << rank << " is not a rank of group " << comm.name() << " (size "
      << comm.size() << ")";
}

int64_t CheckBlocks(const Communicator& comm, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, const char* what) {
  TETRA_CHECK(static_cast<int>(counts.size()) == comm.size() &&
              static_cast<int>(offsets.size()) == comm.size())
      << "all_to_all_v: " << counts.size() << " " << what << " counts and " << offsets.size()
      << " offsets for group " << comm.name() << " of size " << comm.size();
  int64_t extent = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    TETRA_CHECK(counts[r] >= 0 && offsets[r] >= 0)
        << "all_to_all_v: " << what << " block " << r << " has count " << counts[r] << " at offset "
        << offsets[r];
    if (counts[r] > 0) extent = std::max(extent, offsets[r] + counts[r]);
  }
  return extent;
}

std::string DescribeGroupRank(const Communicator& comm, int rank) {
  return absl::StrCat("rank ", rank, " (world ", comm.ranks()[rank], ")");
}

std::string DescribeSendRecv(const Communicator& comm, const Tensor& send, int to,
                             const Tensor& recv, int from) {
  return absl::StrCat("send_recv of ", send.numel(), " ", DTypeName(send.dtype()), " to ",
                      DescribeGroupRank(comm, to), " and ", recv.numel(), " from ",
                      DescribeGroupRank(comm, from), " on ", DescribeGroup(comm));
}

CommHandle Both(CommHandle a, CommHandle b, std::function<std::string()> describe,
                double timeout_s) {
  auto pair = std::make_shared<std::pair<CommHandle, CommHandle>>(std::move(a), std::move(b));
  return CommHandle(
      [pair] {
        const bool first = pair->first.Test();  // both polled every time: each makes progress
        return pair->second.Test() && first;
      },
      std::move(describe), timeout_s);
}

std::string DescribeOp(const Communicator& comm, const std::string& op, int64_t count, DType dtype,
                       const std::string& detail) {
  return absl::StrCat(op, " of ", count, " ", DTypeName(dtype), detail.empty() ? "" : " ", detail,
                      " on ", DescribeGroup(comm));
}

}  // namespace tetra
