#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/backend_util.h"
#include "core/logging.h"

// A failed MPI call is a broken invariant: fatal, with MPI's own words.
#define TETRA_MPI_CHECK(call)                                                                \
  do {                                                                                       \
    const int tetra_mpi_rc = (call);                                                         \
    TETRA_CHECK(tetra_mpi_rc == MPI_SUCCESS) << #call << ": " << MpiErrorText(tetra_mpi_rc); \
  } while (0)

namespace tetra {
namespace {

// How long a timed-out wait waits for other ranks to answer its liveness
// probe: a live rank in a wait answers within milliseconds.
constexpr double kLivenessWindowS = 2;
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
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;  // moved, never reduced
  }
  TETRA_CHECK(false) << "unknown dtype";
  return MPI_DATATYPE_NULL;
}

MPI_Datatype MpiReduceType(DType dtype, ReduceOp op, const char* op_name) {
  TETRA_CHECK(dtype == DType::kF32 || dtype == DType::kI32)
      << op_name << ": the MPI backend reduces F32 and I32 only, not " << DTypeName(dtype)
      << " (it moves " << DTypeName(dtype) << " but does not add it; gather the values and add "
      << "them in rank order, as SumOverRanks does)";
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
    // The emulated GPU's NCCL calls MPI from its streams' threads.
#if TETRA_EMULATED_GPU
    constexpr int kLevel = MPI_THREAD_MULTIPLE;
    constexpr char kLevelName[] = "MPI_THREAD_MULTIPLE";
#else
    constexpr int kLevel = MPI_THREAD_FUNNELED;
    constexpr char kLevelName[] = "MPI_THREAD_FUNNELED";
#endif
    int provided = 0;
    TETRA_MPI_CHECK(MPI_Init_thread(argc, argv, kLevel, &provided));
    TETRA_CHECK(provided >= kLevel)
        << "MPI gives thread level " << provided << ", tetra needs " << kLevelName;
    initialised_here_ = true;
  }
  g_session_live = true;
  TETRA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TETRA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TETRA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  SetLogRank(world_rank_);
  previous_abort_handler_ = SetCommAbortHandler([] { MPI_Abort(MPI_COMM_WORLD, 1); });
  liveness_ = std::make_unique<MpiLiveness>();
  previous_wait_hooks_ =
      SetWaitHooks({.while_sleeping = [this] { liveness_->AnswerProbes(); },
                    .missing_ranks = [this] { return liveness_->MissingRanks(kLivenessWindowS); }});
}

MpiSession::~MpiSession() {
  SetWaitHooks(std::move(previous_wait_hooks_));
  liveness_.reset();
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
    : comm_(comm),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      timeout_s_(timeout_s) {
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
  TETRA_MPI_CHECK(
      MPI_Group_translate_ranks(group, size, ranks.data(), world_group, in_world.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  TETRA_CHECK(in_world == world_ranks_)
      << "group " << name_ << ": MPI communicator has world ranks ["
      << absl::StrJoin(in_world, ", ") << "], expected [" << absl::StrJoin(world_ranks_, ", ")
      << "]";
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

CommHandle MpiCommunicator::StartAllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
  const MPI_Datatype type = MpiReduceType(send.dtype(), op, "all_reduce");
  const int n = MpiCount(recv.numel(), "all_reduce");
  auto pending = std::make_shared<Pending>();
  if (op == ReduceOp::kMean) {
    pending->finish = [recv, size = size()](const MPI_Status&) {
      DivideInPlace(recv.raw(), recv.numel(), size);
    };
  }
  const bool in_place = send.raw() == recv.raw();
  TETRA_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : send.raw(), recv.raw(), n, type,
                                 MpiOp(op), comm_, &pending->request));
  return Watch(std::move(pending), [this, op, count = recv.numel(), dtype = recv.dtype()] {
    return DescribeOp(*this, OpWithReduction("all_reduce", op), count, dtype);
  });
}

CommHandle MpiCommunicator::StartReduceScatter(const Tensor& send, const Tensor& recv,
                                               ReduceOp op) {
  const MPI_Datatype type = MpiReduceType(send.dtype(), op, "reduce_scatter");
  const int n = MpiCount(recv.numel(), "reduce_scatter");
  MpiCount(send.numel(), "reduce_scatter");
  // In place, MPI leaves the result in block 0; the layout wants it in block rank().
  const bool in_place = IsOwnBlock(*this, send, recv);
  const bool from_block_0 = in_place && rank_ != 0;
  auto pending = std::make_shared<Pending>();
  pending->finish = [send, recv, op, from_block_0, size = size()](const MPI_Status&) {
    if (from_block_0) recv.CopyFrom(ElementRange(send, 0, recv.numel()));
    if (op == ReduceOp::kMean) DivideInPlace(recv.raw(), recv.numel(), size);
  };
  TETRA_MPI_CHECK(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send.raw(),
                                            in_place ? send.raw() : recv.raw(), n, type, MpiOp(op),
                                            comm_, &pending->request));
  return Watch(std::move(pending), [this, op, count = send.numel(), dtype = send.dtype()] {
    return DescribeOp(*this, OpWithReduction("reduce_scatter", op), count, dtype);
  });
}

CommHandle MpiCommunicator::StartAllGather(const Tensor& send, const Tensor& recv) {
  const MPI_Datatype type = MpiType(send.dtype());
  const int n = MpiCount(send.numel(), "all_gather");
  MpiCount(recv.numel(), "all_gather");
  const bool in_place = IsOwnBlock(*this, recv, send);
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send.raw(), n, type, recv.raw(), n, type,
                                 comm_, &pending->request));
  return Watch(std::move(pending), [this, count = recv.numel(), dtype = recv.dtype()] {
    return DescribeOp(*this, "all_gather", count, dtype);
  });
}

CommHandle MpiCommunicator::StartAllToAll(const Tensor& send, const Tensor& recv) {
  const MPI_Datatype type = MpiType(send.dtype());
  const int n = MpiCount(send.numel() / size(), "all_to_all");
  MpiCount(send.numel(), "all_to_all");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(
      MPI_Ialltoall(send.raw(), n, type, recv.raw(), n, type, comm_, &pending->request));
  return Watch(std::move(pending), [this, count = send.numel(), dtype = send.dtype()] {
    return DescribeOp(*this, "all_to_all", count, dtype);
  });
}

CommHandle MpiCommunicator::StartAllToAllV(const Tensor& send,
                                           const std::vector<int64_t>& send_counts,
                                           const std::vector<int64_t>& send_offsets,
                                           const Tensor& recv,
                                           const std::vector<int64_t>& recv_counts,
                                           const std::vector<int64_t>& recv_offsets) {
  const MPI_Datatype type = MpiType(send.dtype());
  auto pending = std::make_shared<Pending>();
  for (const auto* list : {&send_counts, &send_offsets, &recv_counts, &recv_offsets}) {
    for (int64_t v : *list) pending->int_args.push_back(MpiCount(v, "all_to_all_v"));
  }
  const int* args = pending->int_args.data();
  const int p = size();
  TETRA_MPI_CHECK(MPI_Ialltoallv(send.raw(), args, args + p, type, recv.raw(), args + 2 * p,
                                 args + 3 * p, type, comm_, &pending->request));
  int64_t sent = 0, received = 0;
  for (int r = 0; r < p; ++r) sent += send_counts[r], received += recv_counts[r];
  return Watch(std::move(pending), [this, sent, received, dtype = send.dtype()] {
    return DescribeOp(*this, "all_to_all_v", sent, dtype,
                      absl::StrCat("(", received, " received)"));
  });
}

CommHandle MpiCommunicator::StartBroadcast(const Tensor& buffer, int root) {
  const int n = MpiCount(buffer.numel(), "broadcast");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(
      MPI_Ibcast(buffer.raw(), n, MpiType(buffer.dtype()), root, comm_, &pending->request));
  return Watch(std::move(pending), [this, count = buffer.numel(), dtype = buffer.dtype(), root] {
    return DescribeOp(*this, "broadcast", count, dtype, "from " + DescribeGroupRank(*this, root));
  });
}

CommHandle MpiCommunicator::StartSend(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag >= 0 && tag <= kMaxPortableTag) << "send: tag " << tag << " outside [0, 32767]";
  const int n = MpiCount(buffer.numel(), "send");
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(
      MPI_Isend(buffer.raw(), n, MpiType(buffer.dtype()), peer, tag, comm_, &pending->request));
  const int64_t count = buffer.numel();
  return Watch(std::move(pending), [this, count, dtype = buffer.dtype(), peer, tag] {
    return DescribeOp(*this, "send", count, dtype,
                      absl::StrCat("to ", DescribeGroupRank(*this, peer), ", tag ", tag, ","));
  });
}

CommHandle MpiCommunicator::StartRecv(const Tensor& buffer, int peer, int tag) {
  TETRA_CHECK(tag >= 0 && tag <= kMaxPortableTag) << "recv: tag " << tag << " outside [0, 32767]";
  const MPI_Datatype type = MpiType(buffer.dtype());
  const int n = MpiCount(buffer.numel(), "recv");
  auto pending = std::make_shared<Pending>();
  pending->finish = [this, type, n, peer](const MPI_Status& status) {
    int received = 0;
    TETRA_MPI_CHECK(MPI_Get_count(&status, type, &received));
    TETRA_CHECK(received == n) << "recv from " << DescribeGroupRank(*this, peer) << " on group "
                               << name_ << ": expected " << n << " elements, got " << received;
  };
  TETRA_MPI_CHECK(MPI_Irecv(buffer.raw(), n, type, peer, tag, comm_, &pending->request));
  const int64_t count = buffer.numel();
  return Watch(std::move(pending), [this, count, dtype = buffer.dtype(), peer, tag] {
    return DescribeOp(*this, "recv", count, dtype,
                      absl::StrCat("from ", DescribeGroupRank(*this, peer), ", tag ", tag, ","));
  });
}

CommHandle MpiCommunicator::StartSendRecv(const Tensor& send, int to, const Tensor& recv,
                                          int from) {
  return Both(
      StartRecv(recv, from, 0), StartSend(send, to, 0),
      [this, send, to, recv, from] { return DescribeSendRecv(*this, send, to, recv, from); },
      timeout_s_);
}

CommHandle MpiCommunicator::StartBarrier() {
  auto pending = std::make_shared<Pending>();
  TETRA_MPI_CHECK(MPI_Ibarrier(comm_, &pending->request));
  return Watch(std::move(pending),
               [this] { return absl::StrCat("barrier on ", DescribeGroup(*this)); });
}

std::unique_ptr<Communicator> MpiCommunicator::Split(const std::vector<int>& world_ranks,
                                                     const std::string& name) {
  const int me = world_ranks_[rank_];
  const auto mine = std::find(world_ranks.begin(), world_ranks.end(), me);
  TETRA_CHECK(std::is_sorted(world_ranks.begin(), world_ranks.end()) && mine != world_ranks.end())
      << "split of " << name_ << " into " << name << ": world ranks ["
      << absl::StrJoin(world_ranks, ", ") << "] must be ascending and contain this rank (" << me
      << ")";
  // Each rank's group is named by its first world rank. Gathering them (a
  // watched collective) lets every rank check that all agree on the groups
  // before MPI_Comm_split, which has no non-blocking form.
  int color = world_ranks.front();
  std::vector<int> colors(size());
  AllGather(Tensor::View(&color, {1}, DType::kI32),
            Tensor::View(colors.data(), {size()}, DType::kI32));
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (colors[r] == color) members.push_back(world_ranks_[r]);
  }
  TETRA_CHECK(members == world_ranks)
      << "split of " << name_ << " into " << name << ": world rank " << me << " is in group ["
      << absl::StrJoin(world_ranks, ", ") << "] but the ranks that named the same first rank are ["
      << absl::StrJoin(members, ", ") << "]; every rank must pass its own group of one partition";
  MPI_Comm comm;
  TETRA_MPI_CHECK(
      MPI_Comm_split(comm_, color, static_cast<int>(mine - world_ranks.begin()), &comm));
  return std::make_unique<MpiCommunicator>(comm, name, world_ranks, timeout_s_);
}

}  // namespace tetra
