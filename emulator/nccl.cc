// The emulated GPU's NCCL: libtetra_nccl_emulator.so, which the emulated
// build's comm/cuda/nccl_library.cc loads in place of libnccl.so.2. NCCL's
// entry points run over MPI, one NCCL rank per MPI process, and keep the
// rules tetra's NCCL code must follow on a real GPU, so CI proves them:
//   - ncclCommInitRank is collective over the members only: each tells the
//     id's creator its world rank (MPI_COMM_WORLD, reserved tags, the id's
//     nonce in the payload), the creator answers with the members in NCCL
//     rank order and they make an MPI communicator of just them. The creator
//     must be a member (tetra's group rank 0 makes the id): NCCL's creator
//     serves the rendezvous from a thread, which MPI cannot end cleanly;
//   - arguments are checked as NCCL checks them, with its result codes and a
//     message for ncclGetLastError; the operation is then posted on its
//     stream and the host returns. A communicator's operations run one at a
//     time in posting order, whatever their streams, as NCCL's kernels do
//     (it has no tags: order is what matches operations across ranks);
//   - buffers are read where the kernel reads them, on the stream when the
//     operation runs: one that is not device memory of the communicator's
//     device ends the process as a device fault would (Fail);
//   - outside a group a send ends only once its peer has posted the matching
//     receive (MPI_Issend), so two ranks that each send first deadlock as on
//     NCCL, and a send or receive to oneself is refused. ncclGroupStart/End
//     (nested, per host thread) gather operations that start together at the
//     outermost ncclGroupEnd, once every stream they were posted on reaches
//     them (NCCL joins a group's streams); there a send to oneself pairs with
//     a receive from oneself, in order, as a copy;
//   - reductions take NCCL's types and operations: fp16 and bf16 combine in
//     fp32 and round each result back, as the device does; ncclAvg is NCCL's:
//     floats pre-multiplied by 1/nranks rounded to their type, then summed,
//     integers summed, then divided (truncating);
//   - a receive whose message has another size, and an operation MPI fails,
//     are asynchronous errors (ncclCommGetAsyncError), as NCCL reports remote
//     and usage errors after the fact;
//   - waits poll (MPI_Test), so ncclCommAbort never waits: operations not yet
//     run, or waiting for a peer, are dropped. MPI cannot cancel a collective,
//     so an aborted communicator's MPI communicator and any collective it was
//     running are left behind (NCCL's abort ends the process's part of them).
// MPI must be initialised with MPI_THREAD_MULTIPLE: operations call MPI from
// the streams' worker threads.
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "emulator/emulated_device.h"

namespace tetra::emulator {
namespace {

// ncclGetLastError's message: set by any thread (a stream's worker reports
// asynchronous errors), so shared and guarded.
struct LastError {
  std::mutex mutex;
  std::string message;
};

LastError& TheLastError() {
  static auto* const last = new LastError;  // never destroyed: workers may report during exit
  return *last;
}

void SetLastError(std::string message) {
  LastError& last = TheLastError();
  std::lock_guard<std::mutex> lock(last.mutex);
  last.message = std::move(message);
}

ncclResult_t Refuse(ncclResult_t result, std::string message) {
  SetLastError(std::move(message));
  return result;
}

std::string MpiErrorText(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return std::string(text, length);
}

// One NCCL communicator: this rank's part of it.
struct CommState {
  MPI_Comm mpi = MPI_COMM_NULL;  // the members, MPI rank = NCCL rank
  int rank = 0;
  int nranks = 1;
  int device = 0;  // the device current at ncclCommInitRank
  std::atomic<bool> aborted{false};
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  // Guarded by Scheduler::mutex. Each launch takes a ticket when posted and
  // runs when `serving` reaches it: posting order across streams.
  uint64_t next_ticket = 0;
  uint64_t serving = 0;
  int outstanding = 0;  // launches posted and not yet run (ncclCommDestroy waits for them)
};

// The first asynchronous error sticks, as NCCL's does.
void RaiseAsync(CommState& comm, ncclResult_t result, std::string message) {
  ncclResult_t none = ncclSuccess;
  comm.async_error.compare_exchange_strong(none, result);
  SetLastError(std::move(message));
}

// Guards every communicator's tickets; `changed` announces a turn served, an
// abort or a group's run finished.
struct Scheduler {
  std::mutex mutex;
  std::condition_variable changed;
};

Scheduler& TheScheduler() {
  static auto* const scheduler = new Scheduler;  // never destroyed: workers may run during exit
  return *scheduler;
}

// ---- Element types and reductions.

bool IsValidType(int type) { return type >= ncclInt8 && type <= ncclBfloat16; }

const char* TypeName(ncclDataType_t type) {
  static constexpr const char* kNames[] = {
      "ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
      "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return kNames[type];
}

size_t TypeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

bool IsFloat(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32 || type == ncclFloat64;
}

MPI_Datatype MpiType(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat16:
    case ncclBfloat16:
      return MPI_UINT16_T;  // reduced by the operations of Ops16
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

// fp16 and bf16, rounding to nearest even as the device converts.
struct Half {
  static float ToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }
  static uint16_t FromFloat(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

struct Bfloat16 {
  static float ToFloat(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  static uint16_t FromFloat(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

struct Max {
  float operator()(float a, float b) const { return std::fmax(a, b); }
};
struct Min {
  float operator()(float a, float b) const { return std::fmin(a, b); }
};

// An MPI user operation on 16-bit floats: each pair combined in fp32, the
// result rounded back, as the device's reduction kernels do.
template <typename Format, typename Combine>
void Combine16(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const char*>(in);
  auto* b = static_cast<char*>(inout);
  for (int i = 0; i < *length; ++i) {
    uint16_t x, y;
    std::memcpy(&x, a + 2 * i, 2);
    std::memcpy(&y, b + 2 * i, 2);
    y = Format::FromFloat(Combine()(Format::ToFloat(x), Format::ToFloat(y)));
    std::memcpy(b + 2 * i, &y, 2);
  }
}

// Indexed by ncclSum, ncclProd, ncclMax, ncclMin.
template <typename Format>
const std::vector<MPI_Op>& Ops16() {
  static const auto* const ops = [] {
    MPI_User_function* const functions[] = {&Combine16<Format, std::plus<float>>,
                                            &Combine16<Format, std::multiplies<float>>,
                                            &Combine16<Format, Max>, &Combine16<Format, Min>};
    auto* made = new std::vector<MPI_Op>;
    for (MPI_User_function* function : functions) {
      MPI_Op op;
      const int rc = MPI_Op_create(function, /*commute=*/1, &op);
      if (rc != MPI_SUCCESS) Fail("emulated NCCL: MPI_Op_create failed: " + MpiErrorText(rc));
      made->push_back(op);
    }
    return made;
  }();
  return *ops;
}

// ncclAvg sums (after PreMultiply or before PostDivide).
MPI_Op MpiOp(ncclRedOp_t op, ncclDataType_t type) {
  const int index = op == ncclAvg ? ncclSum : op;
  if (type == ncclFloat16) return Ops16<Half>()[index];
  if (type == ncclBfloat16) return Ops16<Bfloat16>()[index];
  static const MPI_Op kBuiltIn[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return kBuiltIn[index];
}

template <typename T>
void ScaleEach(char* data, size_t n, T scale) {
  for (size_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, data + i * sizeof(T), sizeof(T));
    x *= scale;
    std::memcpy(data + i * sizeof(T), &x, sizeof(T));
  }
}

template <typename Format>
void ScaleEach16(char* data, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t x;
    std::memcpy(&x, data + 2 * i, 2);
    x = Format::FromFloat(Format::ToFloat(x) * scale);
    std::memcpy(data + 2 * i, &x, 2);
  }
}

// NCCL's ncclAvg of floats: each input times 1/nranks in its own type.
void PreMultiply(char* data, size_t n, ncclDataType_t type, int nranks) {
  const double scale = 1.0 / nranks;
  switch (type) {
    case ncclFloat16:
      return ScaleEach16<Half>(data, n, Half::ToFloat(Half::FromFloat(static_cast<float>(scale))));
    case ncclBfloat16:
      return ScaleEach16<Bfloat16>(
          data, n, Bfloat16::ToFloat(Bfloat16::FromFloat(static_cast<float>(scale))));
    case ncclFloat32:
      return ScaleEach<float>(data, n, static_cast<float>(scale));
    case ncclFloat64:
      return ScaleEach<double>(data, n, scale);
    default:
      return;
  }
}

template <typename T>
void DivideEach(char* data, size_t n, int nranks) {
  for (size_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, data + i * sizeof(T), sizeof(T));
    if constexpr (std::is_signed_v<T>) {
      x = static_cast<T>(static_cast<int64_t>(x) / nranks);
    } else {
      x = static_cast<T>(static_cast<uint64_t>(x) / static_cast<uint64_t>(nranks));
    }
    std::memcpy(data + i * sizeof(T), &x, sizeof(T));
  }
}

// NCCL's ncclAvg of integers: the sum divided by nranks, truncating.
void PostDivide(char* data, size_t n, ncclDataType_t type, int nranks) {
  switch (type) {
    case ncclInt8:
      return DivideEach<int8_t>(data, n, nranks);
    case ncclUint8:
      return DivideEach<uint8_t>(data, n, nranks);
    case ncclInt32:
      return DivideEach<int32_t>(data, n, nranks);
    case ncclUint32:
      return DivideEach<uint32_t>(data, n, nranks);
    case ncclInt64:
      return DivideEach<int64_t>(data, n, nranks);
    case ncclUint64:
      return DivideEach<uint64_t>(data, n, nranks);
    default:
      return;
  }
}

// ---- Operations.

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv };

bool IsCollective(Kind kind) { return kind != Kind::kSend && kind != Kind::kRecv; }
bool IsReduction(Kind kind) { return kind == Kind::kAllReduce || kind == Kind::kReduceScatter; }

struct Op {
  Kind kind;
  const char* name;  // the NCCL call, for messages
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // the call's count argument
  ncclDataType_t type = ncclInt8;
  ncclRedOp_t red_op = ncclSum;
  int peer = 0;  // a broadcast's root, a send's or receive's peer
  cudaStream_t stream = nullptr;
  std::shared_ptr<CommState> comm{};

  // In a launch: the send a receive from oneself copies (its index).
  size_t self_send = 0;
  // Running.
  std::vector<char> staging{};  // the input MPI reads, where it cannot read `send`
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
  bool failed = false;
};

size_t Bytes(const Op& op) { return op.count * TypeBytes(op.type); }

std::string Describe(const Op& op) {
  std::string text = absl::StrFormat("%s of %d %s", op.name, op.count, TypeName(op.type));
  if (op.kind == Kind::kSend) absl::StrAppendFormat(&text, " to rank %d", op.peer);
  if (op.kind == Kind::kRecv) absl::StrAppendFormat(&text, " from rank %d", op.peer);
  if (op.kind == Kind::kBroadcast) absl::StrAppendFormat(&text, " from root %d", op.peer);
  absl::StrAppendFormat(&text, " on rank %d of %d", op.comm->rank, op.comm->nranks);
  return text;
}

// What a device would fault on: [p, p + bytes) must lie in one allocation of
// the communicator's device.
void ExpectDeviceMemory(const Op& op, const char* operand, const void* p, size_t bytes) {
  if (bytes == 0) return;
  const std::optional<DeviceRange> start = FindDeviceRange(p, 1);
  if (!start.has_value()) {
    Fail(absl::StrFormat("%s: %s %p is not device memory (a real GPU faults reading it)",
                         Describe(op), operand, p));
  }
  if (!FindDeviceRange(p, bytes).has_value()) {
    const size_t offset = static_cast<const char*>(p) - start->begin;
    Fail(absl::StrFormat("%s: %s %p spans %d bytes and runs past its device allocation by %d bytes",
                         Describe(op), operand, p, bytes, offset + bytes - start->bytes));
  }
  if (start->device != op.comm->device) {
    Fail(
        absl::StrFormat("%s: %s %p is memory of emulated GPU %d, but the communicator is on GPU %d",
                        Describe(op), operand, p, start->device, op.comm->device));
  }
}

void CheckBuffers(const Op& op) {
  const size_t bytes = Bytes(op), all = bytes * op.comm->nranks;
  switch (op.kind) {
    case Kind::kAllReduce:
      ExpectDeviceMemory(op, "sendbuff", op.send, bytes);
      ExpectDeviceMemory(op, "recvbuff", op.recv, bytes);
      return;
    case Kind::kReduceScatter:
      ExpectDeviceMemory(op, "sendbuff", op.send, all);
      ExpectDeviceMemory(op, "recvbuff", op.recv, bytes);
      return;
    case Kind::kAllGather:
      ExpectDeviceMemory(op, "sendbuff", op.send, bytes);
      ExpectDeviceMemory(op, "recvbuff", op.recv, all);
      return;
    case Kind::kBroadcast:
      if (op.comm->rank == op.peer)
        ExpectDeviceMemory(op, "sendbuff", op.send, bytes);  // only the root's is read
      ExpectDeviceMemory(op, "recvbuff", op.recv, bytes);
      return;
    case Kind::kSend:
      ExpectDeviceMemory(op, "sendbuff", op.send, bytes);
      return;
    case Kind::kRecv:
      ExpectDeviceMemory(op, "recvbuff", op.recv, bytes);
      return;
  }
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// What MPI reads as this rank's input: `send` itself, or a copy where MPI may
// not read it (it overlaps the output: NCCL's in-place forms) or where
// ncclAvg scales the inputs first.
const void* Input(Op& op, size_t send_bytes, size_t recv_bytes) {
  const bool pre_multiply = IsReduction(op.kind) && op.red_op == ncclAvg && IsFloat(op.type);
  if (!pre_multiply && !Overlap(op.send, send_bytes, op.recv, recv_bytes)) return op.send;
  const auto* send = static_cast<const char*>(op.send);
  op.staging.assign(send, send + send_bytes);
  if (pre_multiply)
    PreMultiply(op.staging.data(), send_bytes / TypeBytes(op.type), op.type, op.comm->nranks);
  return op.staging.data();
}

// A failed MPI call or request: an asynchronous error of the communicator.
void Failed(Op& op, int rc) {
  if (op.request != MPI_REQUEST_NULL) MPI_Request_free(&op.request);
  op.done = op.failed = true;
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(rc, &error_class);
  if (error_class == MPI_ERR_TRUNCATE) {
    RaiseAsync(*op.comm, ncclInvalidUsage,
               absl::StrFormat(
                   "%s: more data arrived than the %d bytes posted: the ranks posted different "
                   "counts or types (NCCL would hang or corrupt memory)",
                   Describe(op), Bytes(op)));
  } else {
    RaiseAsync(*op.comm, ncclRemoteError,
               absl::StrFormat("%s failed in MPI: %s", Describe(op), MpiErrorText(rc)));
  }
}

// `ops` is the launch holding `op` (a receive from oneself copies its send).
void Start(Op& op, const std::vector<Op>& ops) {
  const CommState& comm = *op.comm;
  const size_t bytes = Bytes(op), all = bytes * comm.nranks;
  const MPI_Datatype type = MpiType(op.type);
  const int count = static_cast<int>(op.count);  // Submit refused larger counts
  int rc = MPI_SUCCESS;
  switch (op.kind) {
    case Kind::kAllReduce:
      rc = MPI_Iallreduce(Input(op, bytes, bytes), op.recv, count, type, MpiOp(op.red_op, op.type),
                          comm.mpi, &op.request);
      break;
    case Kind::kReduceScatter:
      rc = MPI_Ireduce_scatter_block(Input(op, all, bytes), op.recv, count, type,
                                     MpiOp(op.red_op, op.type), comm.mpi, &op.request);
      break;
    case Kind::kAllGather:
      rc = MPI_Iallgather(Input(op, bytes, all), count, type, op.recv, count, type, comm.mpi,
                          &op.request);
      break;
    case Kind::kBroadcast:
      if (comm.rank == op.peer && op.send != op.recv) std::memmove(op.recv, op.send, bytes);
      rc = MPI_Ibcast(op.recv, count, type, op.peer, comm.mpi, &op.request);
      break;
    case Kind::kSend:
      if (op.peer != comm.rank)
        rc = MPI_Issend(op.send, count, type, op.peer, 0, comm.mpi, &op.request);
      break;
    case Kind::kRecv:
      if (op.peer == comm.rank) {
        std::memmove(op.recv, ops[op.self_send].send, bytes);
      } else {
        rc = MPI_Irecv(op.recv, count, type, op.peer, 0, comm.mpi, &op.request);
      }
      break;
  }
  if (rc != MPI_SUCCESS) Failed(op, rc);
}

void Poll(Op& op) {
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Test(&op.request, &flag, &status);
  if (rc != MPI_SUCCESS) return Failed(op, rc);
  if (flag == 0) return;
  op.done = true;
  if (op.kind != Kind::kRecv || op.peer == op.comm->rank) return;
  int received = 0;
  MPI_Get_count(&status, MpiType(op.type), &received);
  if (received != static_cast<int>(op.count)) {
    op.failed = true;
    RaiseAsync(*op.comm, ncclInvalidUsage,
               absl::StrFormat(
                   "%s: the sender sent %s %s elements: a send and its receive must have the same "
                   "count and type (NCCL would hang or corrupt memory)",
                   Describe(op), received == MPI_UNDEFINED ? "not whole" : std::to_string(received),
                   TypeName(op.type)));
  }
}

// An aborted communicator's operation: MPI is told to forget it where it can.
void Drop(Op& op) {
  if (op.request != MPI_REQUEST_NULL) {
    if (op.kind == Kind::kRecv) {
      MPI_Cancel(&op.request);  // nothing arrives into a buffer the caller may free
      MPI_Request_free(&op.request);
    } else if (op.kind == Kind::kSend) {
      MPI_Request_free(&op.request);
    } else {
      // A collective's request can be neither cancelled nor freed, and MPI
      // may still read its input: the staging copy is left allocated.
      new std::vector<char>(std::move(op.staging));
    }
  }
  op.done = true;
}

void Finish(Op& op) {
  if (IsReduction(op.kind) && op.red_op == ncclAvg && !IsFloat(op.type)) {
    PostDivide(static_cast<char*>(op.recv), op.count, op.type, op.comm->nranks);
  }
}

// Operations posted together (one call, or one group): they start together
// once every stream they were posted on has reached them and each
// communicator's earlier operations have run.
struct Launch {
  std::vector<Op> ops;
  std::vector<std::pair<std::shared_ptr<CommState>, uint64_t>> tickets;  // one per communicator
  // Guarded by Scheduler::mutex.
  int streams_to_arrive = 0;
  bool finished = false;

  bool AllAborted() const {
    for (const auto& [comm, ticket] : tickets) {
      if (!comm->aborted) return false;
    }
    return true;
  }
};

void Run(Launch& launch) {
  Scheduler& scheduler = TheScheduler();
  for (const Op& op : launch.ops) {
    if (!op.comm->aborted) CheckBuffers(op);
  }
  {
    std::unique_lock<std::mutex> lock(scheduler.mutex);
    scheduler.changed.wait(lock, [&] {
      for (const auto& [comm, ticket] : launch.tickets) {
        if (!comm->aborted && comm->serving != ticket) return false;
      }
      return true;
    });
  }
  for (Op& op : launch.ops) {
    if (!op.comm->aborted) Start(op, launch.ops);
  }
  for (bool all_done = false; !all_done;) {
    all_done = true;
    for (Op& op : launch.ops) {
      if (op.done) continue;
      if (op.comm->aborted) {
        Drop(op);
        continue;
      }
      Poll(op);
      all_done = all_done && op.done;
    }
    if (!all_done) std::this_thread::yield();
  }
  for (Op& op : launch.ops) {
    if (!op.failed && !op.comm->aborted) Finish(op);
  }
  {
    std::lock_guard<std::mutex> lock(scheduler.mutex);
    for (auto& [comm, ticket] : launch.tickets) {
      ++comm->serving;
      --comm->outstanding;
    }
    launch.finished = true;
  }
  scheduler.changed.notify_all();
}

// A stream's worker reaching `launch`: the last of its streams to arrive runs
// it, the others wait for it (NCCL makes a group's streams wait for each other).
void Arrive(Launch& launch) {
  {
    Scheduler& scheduler = TheScheduler();
    std::unique_lock<std::mutex> lock(scheduler.mutex);
    if (--launch.streams_to_arrive > 0) {
      scheduler.changed.wait(lock, [&] { return launch.finished || launch.AllAborted(); });
      return;
    }
  }
  Run(launch);
}

// Pairs each receive from oneself with the send to oneself of the same
// position on its communicator, as NCCL's planner does; ncclInvalidUsage
// where one lacks its partner or their sizes differ.
ncclResult_t PairSelfTransfers(std::vector<Op>& ops, bool grouped) {
  std::map<const CommState*, std::pair<std::vector<size_t>, std::vector<size_t>>>
      self;  // sends, receives
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (IsCollective(op.kind) || op.peer != op.comm->rank) continue;
    (op.kind == Kind::kSend ? self[op.comm.get()].first : self[op.comm.get()].second).push_back(i);
  }
  for (const auto& [comm, transfers] : self) {
    const auto& [sends, receives] = transfers;
    if (!grouped) {
      const Op& op = ops[sends.empty() ? receives[0] : sends[0]];
      const bool send = op.kind == Kind::kSend;
      return Refuse(
          ncclInvalidUsage,
          absl::StrFormat("%s: rank %d %s itself outside ncclGroupStart/End; NCCL takes a send to "
                          "oneself only with a receive from oneself in the same group (Trying to "
                          "%s to self without a matching %s)",
                          op.name, comm->rank, send ? "sends to" : "receives from",
                          send ? "send" : "recv", send ? "recv" : "send"));
    }
    if (sends.size() != receives.size()) {
      const bool send_unpaired = sends.size() > receives.size();
      return Refuse(ncclInvalidUsage,
                    absl::StrFormat(
                        "ncclGroupEnd: rank %d's group has %d sends to itself and %d receives from "
                        "itself; NCCL pairs each with the other (Trying to %s to self without a "
                        "matching %s)",
                        comm->rank, sends.size(), receives.size(), send_unpaired ? "send" : "recv",
                        send_unpaired ? "recv" : "send"));
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      Op& receive = ops[receives[i]];
      const Op& send = ops[sends[i]];
      if (Bytes(send) != Bytes(receive)) {
        return Refuse(
            ncclInvalidUsage,
            absl::StrFormat(
                "ncclGroupEnd: rank %d sends %d bytes to itself into a receive of %d bytes",
                comm->rank, Bytes(send), Bytes(receive)));
      }
      receive.self_send = sends[i];
    }
  }
  return ncclSuccess;
}

// Posts `ops` (one call's, or one group's) on their streams.
ncclResult_t Post(std::vector<Op> ops, bool grouped) {
  if (ops.empty()) return ncclSuccess;
  if (const ncclResult_t result = PairSelfTransfers(ops, grouped); result != ncclSuccess)
    return result;
  auto launch = std::make_shared<Launch>();
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
      streams.push_back(op.stream);
    bool listed = false;
    for (const auto& [comm, ticket] : launch->tickets) listed = listed || comm == op.comm;
    if (!listed) launch->tickets.emplace_back(op.comm, 0);
  }
  launch->ops = std::move(ops);
  launch->streams_to_arrive = static_cast<int>(streams.size());
  // Tickets and Enqueue under one lock: each stream's launches then hold
  // increasing tickets, so no stream waits for a launch queued behind it.
  Scheduler& scheduler = TheScheduler();
  std::lock_guard<std::mutex> lock(scheduler.mutex);
  for (auto& [comm, ticket] : launch->tickets) {
    ticket = comm->next_ticket++;
    ++comm->outstanding;
  }
  for (cudaStream_t stream : streams) Enqueue(stream, [launch] { Arrive(*launch); });
  return ncclSuccess;
}

// This host thread's ncclGroupStart/End nesting.
struct Group {
  int depth = 0;
  std::vector<Op> ops;
  ncclResult_t error =
      ncclSuccess;  // the first call refused inside the group: ncclGroupEnd returns it
};

Group& ThisThreadsGroup() {
  thread_local Group group;
  return group;
}

// NCCL's argument checks for an operation on `comm`.
ncclResult_t Check(const Op& op, const CommState* comm) {
  if (comm == nullptr)
    return Refuse(ncclInvalidArgument, absl::StrFormat("%s: comm argument is NULL", op.name));
  if (!IsValidType(op.type)) {
    return Refuse(
        ncclInvalidArgument,
        absl::StrFormat("%s: invalid type %d (the emulated NCCL has ncclInt8 to ncclBfloat16)",
                        op.name, static_cast<int>(op.type)));
  }
  if (IsReduction(op.kind) && (op.red_op < ncclSum || op.red_op >= ncclNumOps)) {
    return Refuse(ncclInvalidArgument, absl::StrFormat("%s: invalid reduction operation %d",
                                                       op.name, static_cast<int>(op.red_op)));
  }
  if (op.kind != Kind::kAllReduce && op.kind != Kind::kReduceScatter &&
      op.kind != Kind::kAllGather && (op.peer < 0 || op.peer >= comm->nranks)) {
    return Refuse(
        ncclInvalidArgument,
        absl::StrFormat("%s: invalid %s %d (it should be in the 0..%d range)", op.name,
                        op.kind == Kind::kBroadcast ? "root" : "peer", op.peer, comm->nranks - 1));
  }
  if (op.count > INT_MAX) {
    Fail(absl::StrFormat(
        "%s: count %d is more than the emulated NCCL moves in one call (INT_MAX elements: MPI "
        "counts are ints)",
        op.name, op.count));
  }
  return ncclSuccess;
}

ncclResult_t Submit(const std::shared_ptr<CommState>& comm, Op op) {
  Group& group = ThisThreadsGroup();
  if (const ncclResult_t result = Check(op, comm.get()); result != ncclSuccess) {
    if (group.depth > 0 && group.error == ncclSuccess) group.error = result;
    return result;
  }
  if (IsCollective(op.kind) && op.count == 0) return ncclSuccess;  // NCCL skips an empty collective
  op.comm = comm;
  if (group.depth > 0) {
    group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> ops;
  ops.push_back(std::move(op));
  return Post(std::move(ops), /*grouped=*/false);
}

ncclResult_t GroupStart() {
  ++ThisThreadsGroup().depth;
  return ncclSuccess;
}

ncclResult_t GroupEnd() {
  Group& group = ThisThreadsGroup();
  if (group.depth == 0)
    return Refuse(ncclInvalidUsage, "ncclGroupEnd: not in a group (no ncclGroupStart)");
  if (--group.depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(group.ops);
  const ncclResult_t error = group.error;
  group = Group();
  if (error != ncclSuccess) return error;  // the group's operations are dropped, as NCCL drops them
  return Post(std::move(ops), /*grouped=*/true);
}

// ---- Bootstrap.

constexpr char kIdMagic[16] = "tetra-emu-nccl";

// What an ncclUniqueId holds.
struct IdContents {
  char magic[sizeof(kIdMagic)];
  int32_t creator;  // its maker's MPI_COMM_WORLD rank
  uint64_t nonce;   // which of its maker's ids
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES);

// ncclSystemError unless MPI is running.
ncclResult_t CheckMpi(const char* call) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised == 0 || finalised != 0) {
    return Refuse(
        ncclSystemError,
        absl::StrFormat(
            "%s: the emulated NCCL runs over MPI, which is not running: initialise it with "
            "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) first",
            call));
  }
  return ncclSuccess;
}

// The bootstrap's messages on MPI_COMM_WORLD: int64s, [creator, nonce, ...].
enum BootstrapTag { kJoinTag, kReplyTag, kCreateTag };

// The reserved tags: the top of MPI's tag range, which tetra's traffic (on
// duplicates of MPI_COMM_WORLD anyway) never reaches.
int Tag(BootstrapTag tag) {
  int* upper_bound = nullptr;
  int present = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper_bound, &present);
  return (present != 0 ? *upper_bound : 32767) - tag;
}

// Messages received while waiting for another: every thread of this process
// waits through it, so each message reaches the bootstrap it belongs to.
struct Mailbox {
  std::mutex mutex;
  std::multimap<std::tuple<int, int64_t, int64_t>, std::vector<int64_t>>
      stash;  // by tag, creator, nonce
};

Mailbox& TheMailbox() {
  static auto* const mailbox = new Mailbox;
  return *mailbox;
}

// The next message with `tag` about the id (`creator`, `nonce`).
std::vector<int64_t> Await(int tag, int64_t creator, int64_t nonce) {
  Mailbox& mailbox = TheMailbox();
  const auto key = std::make_tuple(tag, creator, nonce);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mailbox.mutex);
      if (auto it = mailbox.stash.find(key); it != mailbox.stash.end()) {
        std::vector<int64_t> message = std::move(it->second);
        mailbox.stash.erase(it);
        return message;
      }
      int flag = 0;
      MPI_Message handle;
      MPI_Status status;
      MPI_Improbe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &handle, &status);
      if (flag != 0) {
        int length = 0;
        MPI_Get_count(&status, MPI_INT64_T, &length);
        std::vector<int64_t> message(length);
        MPI_Mrecv(message.data(), length, MPI_INT64_T, &handle, MPI_STATUS_IGNORE);
        mailbox.stash.emplace(std::make_tuple(tag, message[0], message[1]), std::move(message));
        continue;
      }
    }
    std::this_thread::yield();
  }
}

// The creator's verdict on the members' reports.
enum JoinStatus : int64_t { kJoined, kSizesDiffer, kRankTaken, kProcessTwice };

// The creator's part: collects the `nranks` members' reports ([creator,
// nonce, nranks, rank, world rank]) and answers each with [creator, nonce,
// status, world rank of NCCL rank 0, 1, ...].
void Coordinate(const IdContents& id, int nranks, std::vector<MPI_Request>& sends,
                std::vector<std::vector<int64_t>>& replies) {
  std::vector<int64_t> members(nranks, -1), joined;
  int64_t status = kJoined;
  for (int i = 0; i < nranks; ++i) {
    const std::vector<int64_t> join =
        Await(Tag(kJoinTag), id.creator, static_cast<int64_t>(id.nonce));
    const int64_t size = join[2], rank = join[3], world_rank = join[4];
    if (std::find(joined.begin(), joined.end(), world_rank) != joined.end()) {
      status = kProcessTwice;
    } else if (size != nranks) {
      status = kSizesDiffer;
    } else if (members[rank] != -1) {
      status = kRankTaken;
    } else {
      members[rank] = world_rank;
    }
    joined.push_back(world_rank);
  }
  std::vector<int64_t> reply = {id.creator, static_cast<int64_t>(id.nonce), status};
  reply.insert(reply.end(), members.begin(), members.end());
  replies.assign(joined.size(), reply);
  for (size_t i = 0; i < joined.size(); ++i) {
    sends.emplace_back();
    MPI_Isend(replies[i].data(), static_cast<int>(reply.size()), MPI_INT64_T,
              static_cast<int>(joined[i]), Tag(kReplyTag), MPI_COMM_WORLD, &sends.back());
  }
}

// Makes `mpi`: the members of `id`'s communicator, in NCCL rank order.
ncclResult_t Bootstrap(const IdContents& id, int nranks, int rank, MPI_Comm* mpi) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::vector<int64_t> join = {id.creator, static_cast<int64_t>(id.nonce), nranks, rank,
                                     world_rank};
  std::vector<MPI_Request> sends(1);
  MPI_Isend(join.data(), static_cast<int>(join.size()), MPI_INT64_T, id.creator, Tag(kJoinTag),
            MPI_COMM_WORLD, &sends[0]);
  std::vector<std::vector<int64_t>> replies;  // the creator's, alive until sent
  if (world_rank == id.creator) Coordinate(id, nranks, sends, replies);
  const std::vector<int64_t> reply =
      Await(Tag(kReplyTag), id.creator, static_cast<int64_t>(id.nonce));
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  switch (reply[2]) {
    case kJoined:
      break;
    case kSizesDiffer:
      return Refuse(ncclInvalidUsage,
                    absl::StrFormat("ncclCommInitRank: the members of one ncclUniqueId give "
                                    "different nranks (this rank, %d, gives %d)",
                                    rank, nranks));
    case kRankTaken:
      return Refuse(ncclInvalidUsage,
                    "ncclCommInitRank: two members of one ncclUniqueId give the same rank");
    default:
      return Refuse(ncclInvalidUsage,
                    "ncclCommInitRank: a process joined one ncclUniqueId twice; the emulated NCCL "
                    "has one rank "
                    "per process in a communicator");
  }
  const std::vector<int> members(reply.begin() + 3, reply.end());
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, members.data(), &group);
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, Tag(kCreateTag), mpi);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) {
    return Refuse(ncclSystemError,
                  "ncclCommInitRank: MPI_Comm_create_group failed: " + MpiErrorText(rc));
  }
  // Errors come back as results: a truncated receive is the caller's error.
  MPI_Comm_set_errhandler(*mpi, MPI_ERRORS_RETURN);
  return ncclSuccess;
}

ncclResult_t GetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr)
    return Refuse(ncclInvalidArgument, "ncclGetUniqueId: uniqueId argument is NULL");
  if (const ncclResult_t result = CheckMpi("ncclGetUniqueId"); result != ncclSuccess) return result;
  static std::atomic<uint64_t> made{0};
  IdContents id{};
  std::memcpy(id.magic, kIdMagic, sizeof(kIdMagic));
  MPI_Comm_rank(MPI_COMM_WORLD, &id.creator);
  id.nonce = ++made;
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t InitRank(std::shared_ptr<CommState>* comm, int nranks, const ncclUniqueId& unique_id,
                      int rank) {
  if (nranks < 1) {
    return Refuse(ncclInvalidArgument,
                  absl::StrFormat("ncclCommInitRank: invalid comm size %d", nranks));
  }
  if (rank < 0 || rank >= nranks) {
    return Refuse(ncclInvalidArgument,
                  absl::StrFormat("ncclCommInitRank: invalid rank %d (it should be in the "
                                  "0..%d range)",
                                  rank, nranks - 1));
  }
  if (const ncclResult_t result = CheckMpi("ncclCommInitRank"); result != ncclSuccess)
    return result;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    return Refuse(
        ncclSystemError,
        absl::StrFormat(
            "ncclCommInitRank: the emulated NCCL needs MPI initialised with "
            "MPI_THREAD_MULTIPLE (it has thread level %d): its operations call MPI from the "
            "emulated streams' worker threads",
            level));
  }
  IdContents id;
  std::memcpy(&id, unique_id.internal, sizeof(id));
  if (std::memcmp(id.magic, kIdMagic, sizeof(kIdMagic)) != 0) {
    return Refuse(ncclInvalidArgument,
                  "ncclCommInitRank: the ncclUniqueId was not made by ncclGetUniqueId");
  }
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks > world_size) {
    return Refuse(ncclInvalidArgument,
                  absl::StrFormat(
                      "ncclCommInitRank: nranks %d is more than the %d MPI processes (the emulated "
                      "NCCL has one rank per process)",
                      nranks, world_size));
  }
  auto state = std::make_shared<CommState>();
  state->rank = rank;
  state->nranks = nranks;
  state->device = CurrentDevice();
  if (const ncclResult_t result = Bootstrap(id, nranks, rank, &state->mpi); result != ncclSuccess)
    return result;
  *comm = std::move(state);
  return ncclSuccess;
}

ncclResult_t Destroy(std::shared_ptr<CommState> comm) {
  Scheduler& scheduler = TheScheduler();
  {
    std::unique_lock<std::mutex> lock(scheduler.mutex);
    scheduler.changed.wait(lock, [&] { return comm->outstanding == 0; });
  }
  MPI_Comm_free(&comm->mpi);
  return ncclSuccess;
}

ncclResult_t Abort(const std::shared_ptr<CommState>& comm) {
  Scheduler& scheduler = TheScheduler();
  {
    std::lock_guard<std::mutex> lock(scheduler.mutex);  // no waiter misses it
    comm->aborted = true;
  }
  scheduler.changed.notify_all();
  return ncclSuccess;
}

}  // namespace
}  // namespace tetra::emulator

// What an ncclComm_t points to: this rank's communicator, shared with the
// operations still posted on it.
struct ncclComm {
  std::shared_ptr<tetra::emulator::CommState> state;
};

namespace {

std::shared_ptr<tetra::emulator::CommState> StateOf(ncclComm_t comm) {
  return comm == nullptr ? nullptr : comm->state;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return tetra::emulator::GetUniqueId(uniqueId);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr) {
    return tetra::emulator::Refuse(ncclInvalidArgument, "ncclCommInitRank: comm argument is NULL");
  }
  *comm = nullptr;
  std::shared_ptr<tetra::emulator::CommState> state;
  const ncclResult_t result = tetra::emulator::InitRank(&state, nranks, commId, rank);
  if (result == ncclSuccess) *comm = new ncclComm{std::move(state)};
  return result;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::shared_ptr<tetra::emulator::CommState> state = std::move(comm->state);
  delete comm;
  return tetra::emulator::Destroy(std::move(state));
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  const ncclResult_t result = tetra::emulator::Abort(comm->state);
  delete comm;
  return result;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) {
    return tetra::emulator::Refuse(ncclInvalidArgument,
                                   absl::StrFormat("ncclCommGetAsyncError: %s argument is NULL",
                                                   comm == nullptr ? "comm" : "asyncError"));
  }
  *asyncError = comm->state->async_error;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// Any thread may set the message: the caller gets its own copy.
const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;
  tetra::emulator::LastError& last = tetra::emulator::TheLastError();
  std::lock_guard<std::mutex> lock(last.mutex);
  copy = last.message;
  return copy.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kAllReduce,
                                                 .name = "ncclAllReduce",
                                                 .send = sendbuff,
                                                 .recv = recvbuff,
                                                 .count = count,
                                                 .type = datatype,
                                                 .red_op = op,
                                                 .stream = stream});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kReduceScatter,
                                                 .name = "ncclReduceScatter",
                                                 .send = sendbuff,
                                                 .recv = recvbuff,
                                                 .count = recvcount,
                                                 .type = datatype,
                                                 .red_op = op,
                                                 .stream = stream});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kAllGather,
                                                 .name = "ncclAllGather",
                                                 .send = sendbuff,
                                                 .recv = recvbuff,
                                                 .count = sendcount,
                                                 .type = datatype,
                                                 .stream = stream});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kBroadcast,
                                                 .name = "ncclBroadcast",
                                                 .send = sendbuff,
                                                 .recv = recvbuff,
                                                 .count = count,
                                                 .type = datatype,
                                                 .peer = root,
                                                 .stream = stream});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kSend,
                                                 .name = "ncclSend",
                                                 .send = sendbuff,
                                                 .count = count,
                                                 .type = datatype,
                                                 .peer = peer,
                                                 .stream = stream});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  using tetra::emulator::Kind;
  return tetra::emulator::Submit(StateOf(comm), {.kind = Kind::kRecv,
                                                 .name = "ncclRecv",
                                                 .recv = recvbuff,
                                                 .count = count,
                                                 .type = datatype,
                                                 .peer = peer,
                                                 .stream = stream});
}

ncclResult_t ncclGroupStart() { return tetra::emulator::GroupStart(); }

ncclResult_t ncclGroupEnd() { return tetra::emulator::GroupEnd(); }

}  // extern "C"
