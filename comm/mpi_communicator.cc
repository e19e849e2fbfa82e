#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/backend_util.h"
#include "core/logging.h"

// A failed MPI call is a broken invariant: fatal, with MPI's own words.
#define TETRA_MPI_CHECK(call)                                                        \
  do {                                                                               \
    const int tetra_mpi_rc = (call);                                                 \
    TETRA_CHECK(tetra_mpi_rc == MPI_SUCCESS) << #call << ": " << MpiErrorText(tetra_mpi_rc); \
  } while (0)

namespace tetra {
namespace {

// MPI tags up to 32767 are guaranteed by the standard (MPI_TAG_UB >= 32767).
constexpr int kMaxPortableTag = 32767;

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;  // moved, never reduced
  }
  TETRA_CHECK(false) << "unknown dtype";
  return MPI_DATATYPE_NULL;
}

MPI_Datatype MpiReduceType(DType dtype, ReduceOp op, const char* op_name) {
  TETRA_CHECK(dtype == DType::kF32 || dtype == DType::kI32)
      << op_name << ": the MPI backend reduces F32 and I32 only, not " << DTypeName(dtype)
      << " (reduce in F32 on the host)";
  TETRA_CHECK(op != ReduceOp::kMean || dtype == DType::kF32)
      << op_name << ": mean of " << DTypeName(dtype) << " is not defined (integer division); "
      << "reduce with sum and divide where the rounding is wanted";
  return MpiType(dtype);
}

MPI_Op MpiOp(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

int MpiCount(int64_t count, const char* op_name) {
  TETRA_CHECK(count >= 0 && count <= INT_MAX)
      << op_name << ": " << count << " elements is beyond MPI's int count limit (" << INT_MAX
      << "); split the transfer into smaller ones";
  return static_cast<int>(count);
}

// Divides `count` F32 elements by `divisor` in place (kMean's second half).
void DivideInPlace(void* data, int64_t count, int divisor) {
  float* values = static_cast<float*>(data);
  for (int64_t i = 0; i < count; ++i) values[i] /= static_cast<float>(divisor);
}

std::string OpWithReduction(const char* op_name, ReduceOp op) {
  return absl::StrCat(op_name, " (", ReduceOpName(op), ")");
}

bool g_session_live = false;

}  // namespace

// A started MPI request and what must outlive it.
struct MpiCommunicator::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> int_args;  // counts and displacements MPI reads until completion
  std::function<void(const MPI_Status&)> finish;  // after completion, once
};

MpiSession::MpiSession(int* argc, char*** argv) {
  TETRA_CHECK(!g_session_live) << "one MpiSession per process";
  int initialised = 0;
  TETRA_MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    int provided = 0;
    TETRA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    TETRA_CHECK(provided >= MPI_THREAD_FUNNELED)
        << "MPI gives thread level " << provided << ", tetra needs MPI_THREAD_FUNNELED";
    initialised_here_ = true;
  }
  g_session_live = true;
  TETRA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TETRA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TETRA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  SetLogRank(world_rank_);
  previous_abort_handler_ = SetCommAbortHandler([] { MPI_Abort(MPI_COMM_WORLD, 1); });
}

MpiSession::~MpiSession() {
  SetCommAbortHandler(std::move(previous_abort_handler_));
  g_session_live = false;
  if (initialised_here_) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiWorld(double timeout_s) {
  TETRA_CHECK(g_session_live) << "MpiWorld needs an MpiSession (create one in main)";
  MPI_Comm comm;
  TETRA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  int size = 0;
  TETRA_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return std::make_unique<MpiCommunicator>(comm, "world", std::move(ranks), timeout_s);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                                 double timeout_s)
    : comm_(comm), name_(std::move(name)), world_ranks_(std::move(world_ranks)), timeout_s_(timeout_s) {
  TETRA_CHECK(timeout_s_ > 0) << "comm timeout must be positive, got " << timeout_s_ << " s";
  TETRA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TETRA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  int size = 0;
  TETRA_MPI_CHECK(MPI_Comm_size(comm_, &size));
  // The rank list is what messages and callers rely on: check it against MPI's.
  MPI_Group group, world_group;
  TETRA_MPI_CHECK(MPI_Comm_group(comm_, &group));
  TETRA_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> ranks(size), in_world(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  TETRA_MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), world_group, in_world.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  TETRA_CHECK(in_world == world_ranks_)
      << "group " << name_ << ": MPI communicator has world ranks [" << absl::StrJoin(in_world, ", ")
      << "], expected [" << absl::StrJoin(world_ranks_, ", ") << "]";
}

MpiCommunicator::~MpiCommunicator() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Comm_free(&comm_);
}

CommHandle MpiCommunicator::Watch(std::shared_ptr<Pending> pending,
                                  std::function<std::string()> describe) {
  auto poll = [pending = std::move(pending)] {
    int flag = 0;
    MPI_Status status;
    TETRA_MPI_CHECK(MPI_Test(&pending->request, &flag, &status));
    if (flag && pending->finish) pending->finish(status);
    return flag != 0;
  };
  return CommHandle(std::move(poll), std::move(describe), timeout_s_);
}

CommHandle MpiCommunicator::AllReduceAsync(const void* send, void* recv, int64_t count, DType dtype,
                                           ReduceOp op) {
  const MPI_Datatype type = MpiReduceType(dtype, op, "all_reduce");
  const int n = MpiCount(count, "all_reduce");
  const bool in_place = send == recv;
  if (!in_place) CheckDisjoint(send, count * DTypeSize(dtype), recv, count * DTypeSize(dtype), "all_reduce");
  auto pending = std::make_shared<Pending>();
  if (op == ReduceOp::kMean) {
    pending->finish = [recv, count, size = size()](const MPI_Status&) { DivideInPlace(recv, count, size); };
  }
  TETRA_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : send, recv, n, type, MpiOp(op), comm_,
                                 &pending->request));
  return Watch(std::move(pending), [this, op, count, dtype] {
    return DescribeOp(*this, OpWithReduction("all_reduce", op), count, dtype);
  });
}

CommHandle MpiCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                               DType dtype, ReduceOp op) {
  const MPI_Datatype type = MpiReduceType(dtype, op, "reduce_scatter");
  const int n = MpiCount(recv_count, "reduce_scatter");
  MpiCount(recv_count * size(), "reduce_scatter");
  const size_t block_bytes = recv_count * DTypeSize(dtype);
  // In place, MPI leaves the result in block 0; the layout wants it in block rank().
  const bool in_place = recv == ElementPtr(send, rank_ * recv_count, dtype);
  if (!in_place) CheckDisjoint(send, block_bytes * size(), recv, block_bytes, "reduce_scatter");
  auto pending = std::make_shared<Pending>();
  pending->finish = [=, size = size()](const MPI_Status&) {
    if (in_place && recv != send) std::memcpy(recv, send, block_bytes);
    if (op == ReduceOp::kMean) DivideInPlace(recv, recv_count, size);
  };
  TETRA_MPI_CHECK(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send,
                                            in_place ? const_cast<void*>(send) : recv, n, type,
                                            MpiOp(op), comm_, &pending->request));
  return Watch(std::move(pending), [this, op, recv_count, dtype] {
    return DescribeOp(*this, OpWithReduction("reduce_scatter", op), recv_count * size(), dtype);
  });
}

CommHandle MpiCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                           DType dtype) {
  const MPI_Datatype type = MpiType(dtype);
  const int n = MpiCount(send_count, "all_gather");
  MpiCount(send_count * size(), "all_gather");
  const size_t block_bytes = send_count * DTypeSize(dtype);
  const bool in_place = send == ElementPtr(recv, rank_ * send_count, dtype);
  if (!in_place) CheckDisjoint(send, block_bytes, recv, block_bytes * size(), "all_gather");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, type, recv, n, type, comm_,
                                 &pending->request));
  return Watch(std::move(pending), [this, send_count, dtype] {
    return DescribeOp(*this, "all_gather", send_count * size(), dtype);
  });
}

CommHandle MpiCommunicator::AllToAllAsync(const void* send, void* recv, int64_t count, DType dtype) {
  const MPI_Datatype type = MpiType(dtype);
  const int n = MpiCount(count, "all_to_all");
  MpiCount(count * size(), "all_to_all");
  const size_t bytes = count * size() * DTypeSize(dtype);
  CheckDisjoint(send, bytes, recv, bytes, "all_to_all");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Ialltoall(send, n, type, recv, n, type, comm_, &pending->request));
  return Watch(std::move(pending), [this, count, dtype] {
    return DescribeOp(*this, "all_to_all", count * size(), dtype);
  });
}

CommHandle MpiCommunicator::AllToAllVAsync(const void* send, const std::vector<int64_t>& send_counts,
                                           const std::vector<int64_t>& send_offsets, void* recv,
                                           const std::vector<int64_t>& recv_counts,
                                           const std::vector<int64_t>& recv_offsets, DType dtype) {
  const MPI_Datatype type = MpiType(dtype);
  const int64_t send_extent = CheckBlocks(*this, send_counts, send_offsets, "send");
  const int64_t recv_extent = CheckBlocks(*this, recv_counts, recv_offsets, "recv");
  CheckDisjoint(send, send_extent * DTypeSize(dtype), recv, recv_extent * DTypeSize(dtype),
                "all_to_all_v");
  auto pending = std::make_shared<Pending>();
  for (const auto* list : {&send_counts, &send_offsets, &recv_counts, &recv_offsets}) {
    for (int64_t v : *list) pending->int_args.push_back(MpiCount(v, "all_to_all_v"));
  }
  const int* args = pending->int_args.data();
  const int p = size();
  TETRA_MPI_CHECK(MPI_Ialltoallv(send, args, args + p, type, recv, args + 2 * p, args + 3 * p, type,
                                 comm_, &pending->request));
  int64_t sent = 0, received = 0;
  for (int r = 0; r < p; ++r) sent += send_counts[r], received += recv_counts[r];
  return Watch(std::move(pending), [this, sent, received, dtype] {
    return DescribeOp(*this, "all_to_all_v", sent, dtype, absl::StrCat("(", received, " received)"));
  });
}

CommHandle MpiCommunicator::BroadcastAsync(void* buffer, int64_t count, DType dtype, int root) {
  CheckGroupRank(*this, root, "root", "broadcast");
  const int n = MpiCount(count, "broadcast");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Ibcast(buffer, n, MpiType(dtype), root, comm_, &pending->request));
  return Watch(std::move(pending), [this, count, dtype, root] {
    return DescribeOp(*this, "broadcast", count, dtype, "from " + DescribeGroupRank(*this, root));
  });
}

CommHandle MpiCommunicator::SendAsync(const void* buffer, int64_t count, DType dtype, int peer,
                                      int tag) {
  CheckGroupRank(*this, peer, "peer", "send");
  TETRA_CHECK(tag >= 0 && tag <= kMaxPortableTag) << "send: tag " << tag << " outside [0, 32767]";
  const int n = MpiCount(count, "send");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Isend(buffer, n, MpiType(dtype), peer, tag, comm_, &pending->request));
  return Watch(std::move(pending), [this, count, dtype, peer, tag] {
    return DescribeOp(*this, "send", count, dtype,
                      absl::StrCat("to ", DescribeGroupRank(*this, peer), ", tag ", tag, ","));
  });
}

CommHandle MpiCommunicator::RecvAsync(void* buffer, int64_t count, DType dtype, int peer, int tag) {
  CheckGroupRank(*this, peer, "peer", "recv");
  TETRA_CHECK(tag >= 0 && tag <= kMaxPortableTag) << "recv: tag " << tag << " outside [0, 32767]";
  const MPI_Datatype type = MpiType(dtype);
  const int n = MpiCount(count, "recv");
  auto pending = std::make_shared<Pending>();
  pending->finish = [this, type, n, peer](const MPI_Status& status) {
    int received = 0;
    TETRA_MPI_CHECK(MPI_Get_count(&status, type, &received));
    TETRA_CHECK(received == n) << "recv from " << DescribeGroupRank(*this, peer) << " on group "
                               << name_ << ": expected " << n << " elements, got " << received;
  };
  TETRA_MPI_CHECK(MPI_Irecv(buffer, n, type, peer, tag, comm_, &pending->request));
  return Watch(std::move(pending), [this, count, dtype, peer, tag] {
    return DescribeOp(*this, "recv", count, dtype,
                      absl::StrCat("from ", DescribeGroupRank(*this, peer), ", tag ", tag, ","));
  });
}

CommHandle MpiCommunicator::BarrierAsync() {
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Ibarrier(comm_, &pending->request));
  return Watch(std::move(pending), [this] { return absl::StrCat("barrier on ", DescribeGroup(*this)); });
}

std::unique_ptr<Communicator> MpiCommunicator::Split(const std::vector<int>& world_ranks,
                                                     const std::string& name) {
  const int me = world_ranks_[rank_];
  const auto mine = std::find(world_ranks.begin(), world_ranks.end(), me);
  TETRA_CHECK(std::is_sorted(world_ranks.begin(), world_ranks.end()) && mine != world_ranks.end())
      << "split of " << name_ << " into " << name << ": world ranks [" << absl::StrJoin(world_ranks, ", ")
      << "] must be ascending and contain this rank (" << me << ")";
  // Each rank's group is named by its first world rank. Gathering them (a
  // watched collective) lets every rank check that all agree on the groups
  // before MPI_Comm_split, which has no non-blocking form.
  const int color = world_ranks.front();
  std::vector<int> colors(size());
  AllGather(&color, colors.data(), 1, DType::kI32);
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (colors[r] == color) members.push_back(world_ranks_[r]);
  }
  TETRA_CHECK(members == world_ranks)
      << "split of " << name_ << " into " << name << ": world rank " << me << " is in group ["
      << absl::StrJoin(world_ranks, ", ") << "] but the ranks that named the same first rank are ["
      << absl::StrJoin(members, ", ") << "]; every rank must pass its own group of one partition";
  MPI_Comm comm;
  TETRA_MPI_CHECK(MPI_Comm_split(comm_, color, static_cast<int>(mine - world_ranks.begin()), &comm));
  return std::make_unique<MpiCommunicator>(comm, name, world_ranks, timeout_s_);
}

}  // namespace tetra
