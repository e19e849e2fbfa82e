// The emulated GPU's NCCL (emulator/nccl.cc) against NCCL's rules, through
// the library tetra loads (comm/cuda/nccl_library.h), under mpirun with 2, 4
// and 8 ranks: collectives on the world and on communicators that only their
// members make, in place and out of place; grouped exchanges, and copies to
// oneself inside a group; the calls NCCL refuses, with its result codes and
// messages; operations that return before they run and run in posting order;
// ungrouped sends that deadlock as on NCCL until ncclCommAbort ends them;
// size mismatches reported as asynchronous errors. Inputs are small integers
// of (rank, index), so sums and averages over a power-of-two number of ranks
// are exact in F32, BF16 and I32 and compared exactly.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda/nccl_library.h"
#include "cuda_bf16.h"
#include "emulator/emulated_device.h"
#include "gtest/gtest.h"

namespace tetra::emulator {
namespace {

// A failed NCCL call fails the test with NCCL's description and last error.
#define ASSERT_NCCL_OK(call)                                                 \
  do {                                                                       \
    const ncclResult_t tetra_nccl_result = (call);                           \
    ASSERT_EQ(tetra_nccl_result, ncclSuccess)                                \
        << #call << ": " << Nccl().GetErrorString(tetra_nccl_result) << " (" \
        << Nccl().GetLastError(nullptr) << ")";                              \
  } while (0)

// How long a test waits before it checks that an operation has not run.
constexpr auto kSettle = std::chrono::milliseconds(200);
// The MPI_COMM_WORLD tag on which a test hands out its ncclUniqueIds.
constexpr int kIdTag = 7;

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Device memory holding `values`, freed at scope end.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : size_(values.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), size_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  std::vector<T> Read() const {
    std::vector<T> out(size_);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  size_t size_;
  T* data_ = nullptr;
};

class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void Synchronize() const { EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }

 private:
  cudaStream_t stream_ = nullptr;
};

// Holds a stream's worker (work posted after it waits) until Release.
class Gate {
 public:
  explicit Gate(cudaStream_t stream) {
    Enqueue(stream, [this] {
      while (!open_) std::this_thread::yield();
    });
  }
  ~Gate() { Release(); }
  void Release() { open_ = true; }

 private:
  std::atomic<bool> open_{false};
};

// Set by the stream once everything posted on it before has run.
class Reached {
 public:
  explicit Reached(cudaStream_t stream) {
    Enqueue(stream, [this] { reached_ = true; });
  }
  bool operator()() const { return reached_; }

 private:
  std::atomic<bool> reached_{false};
};

// A communicator of `members` (world ranks, in NCCL rank order), made by the
// members alone: the first makes the id and sends it to the others. Null on
// ranks that are not members.
ncclComm_t MakeComm(const std::vector<int>& members) {
  const int me = WorldRank();
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == me) rank = static_cast<int>(i);
  }
  if (rank < 0) return nullptr;
  ncclUniqueId id;
  if (rank == 0) {
    EXPECT_EQ(Nccl().GetUniqueId(&id), ncclSuccess);
    for (size_t i = 1; i < members.size(); ++i) {
      MPI_Send(&id, sizeof(id), MPI_BYTE, members[i], kIdTag, MPI_COMM_WORLD);
    }
  } else {
    MPI_Recv(&id, sizeof(id), MPI_BYTE, members[0], kIdTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t result =
      Nccl().CommInitRank(&comm, static_cast<int>(members.size()), id, rank);
  EXPECT_EQ(result, ncclSuccess) << Nccl().GetLastError(nullptr);
  return comm;
}

std::vector<int> WorldRanks() {
  std::vector<int> all(WorldSize());
  for (int r = 0; r < WorldSize(); ++r) all[r] = r;
  return all;
}

// The even world ranks, or the odd ones: this rank's half of the world.
std::vector<int> ParityRanks() {
  std::vector<int> half;
  for (int r = WorldRank() % 2; r < WorldSize(); r += 2) half.push_back(r);
  return half;
}

// Small integers, exact in every type here: (rank + 1) * (i % 7 + 1) <= 56.
int Value(int rank, size_t i) { return (rank + 1) * static_cast<int>(i % 7 + 1); }

template <typename T>
struct Element;
template <>
struct Element<float> {
  static constexpr ncclDataType_t kType = ncclFloat32;
  static float Make(double x) { return static_cast<float>(x); }
  static double Get(float x) { return x; }
};
template <>
struct Element<__nv_bfloat16> {
  static constexpr ncclDataType_t kType = ncclBfloat16;
  static __nv_bfloat16 Make(double x) { return __float2bfloat16_rn(static_cast<float>(x)); }
  static double Get(__nv_bfloat16 x) { return __bfloat162float(x); }
};
template <>
struct Element<int32_t> {
  static constexpr ncclDataType_t kType = ncclInt32;
  static int32_t Make(double x) { return static_cast<int32_t>(x); }
  static double Get(int32_t x) { return x; }
};

// Element i of the all-reduce `op` over `nranks` ranks of Value(rank, i).
template <typename T>
double Reduced(ncclRedOp_t op, int nranks, size_t i) {
  const int base = static_cast<int>(i % 7 + 1), sum = base * nranks * (nranks + 1) / 2;
  switch (op) {
    case ncclSum:
      return sum;
    case ncclMax:
      return base * nranks;
    case ncclAvg:
      return Element<T>::kType == ncclInt32 ? sum / nranks : static_cast<double>(sum) / nranks;
    default:
      return 0;
  }
}

// Sum, max and average (NCCL's integer average truncates), out of place and in place.
template <typename T>
void ExpectAllReduces(ncclComm_t comm, int rank, int nranks) {
  constexpr size_t kCount = 37;
  std::vector<T> input(kCount), untouched(kCount, Element<T>::Make(-1));
  for (size_t i = 0; i < kCount; ++i) input[i] = Element<T>::Make(Value(rank, i));
  Stream stream;
  for (const ncclRedOp_t op : {ncclSum, ncclMax, ncclAvg}) {
    DeviceArray<T> send(input), recv(untouched), in_place(input);
    ASSERT_NCCL_OK(Nccl().AllReduce(send.get(), recv.get(), kCount, Element<T>::kType, op, comm,
                                    stream.get()));
    ASSERT_NCCL_OK(Nccl().AllReduce(in_place.get(), in_place.get(), kCount, Element<T>::kType, op,
                                    comm, stream.get()));
    stream.Synchronize();
    const std::vector<T> out = recv.Read(), out_in_place = in_place.Read();
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(Element<T>::Get(out[i]), Reduced<T>(op, nranks, i))
          << "op " << op << ", element " << i;
      EXPECT_EQ(Element<T>::Get(out_in_place[i]), Reduced<T>(op, nranks, i))
          << "in place, op " << op;
    }
  }
}

class NcclEmulatorTest : public testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<const NcclLibrary*> nccl = LoadNccl();
    ASSERT_TRUE(nccl.ok()) << nccl.status().message();
    rank_ = WorldRank();
    size_ = WorldSize();
    world_ = MakeComm(WorldRanks());
    ASSERT_NE(world_, nullptr);
  }
  void TearDown() override {
    if (world_ != nullptr) {
      EXPECT_EQ(Nccl().CommDestroy(world_), ncclSuccess);
    }
  }

  int rank_ = 0;
  int size_ = 1;
  ncclComm_t world_ = nullptr;
};

TEST_F(NcclEmulatorTest, AllReducesOnTheWorld) {
  ExpectAllReduces<float>(world_, rank_, size_);
  ExpectAllReduces<__nv_bfloat16>(world_, rank_, size_);
  ExpectAllReduces<int32_t>(world_, rank_, size_);
  ncclResult_t async_error = ncclInternalError;
  ASSERT_NCCL_OK(Nccl().CommGetAsyncError(world_, &async_error));
  EXPECT_EQ(async_error, ncclSuccess);
}

// The even ranks make one communicator and the odd ranks another, at the same
// time, each through ncclCommInitRank on its members only.
TEST_F(NcclEmulatorTest, AllReducesOnCommunicatorsOfTheirMembersOnly) {
  const std::vector<int> members = ParityRanks();
  ncclComm_t half = MakeComm(members);
  ASSERT_NE(half, nullptr);
  const int nranks = static_cast<int>(members.size()), rank = rank_ / 2;
  ExpectAllReduces<float>(half, rank, nranks);
  ExpectAllReduces<__nv_bfloat16>(half, rank, nranks);
  ExpectAllReduces<int32_t>(half, rank, nranks);
  EXPECT_EQ(Nccl().CommDestroy(half), ncclSuccess);
}

TEST_F(NcclEmulatorTest, ReduceScatterGivesEachRankItsBlock) {
  constexpr size_t kBlock = 5;
  std::vector<float> input(size_ * kBlock);
  for (size_t j = 0; j < input.size(); ++j) input[j] = static_cast<float>(Value(rank_, j));
  DeviceArray<float> send(input), recv(std::vector<float>(kBlock, -1)), in_place(input);
  Stream stream;
  ASSERT_NCCL_OK(Nccl().ReduceScatter(send.get(), recv.get(), kBlock, ncclFloat32, ncclSum, world_,
                                      stream.get()));
  // In place: this rank's block of the send buffer is the receive buffer.
  float* const own_block = in_place.get() + rank_ * kBlock;
  ASSERT_NCCL_OK(Nccl().ReduceScatter(in_place.get(), own_block, kBlock, ncclFloat32, ncclSum,
                                      world_, stream.get()));
  stream.Synchronize();
  const std::vector<float> out = recv.Read(), out_in_place = in_place.Read();
  for (size_t i = 0; i < kBlock; ++i) {
    const double expected = Reduced<float>(ncclSum, size_, rank_ * kBlock + i);
    EXPECT_EQ(out[i], expected) << "element " << i;
    EXPECT_EQ(out_in_place[rank_ * kBlock + i], expected) << "in place, element " << i;
  }
}

TEST_F(NcclEmulatorTest, AllGatherConcatenatesTheRanksInRankOrder) {
  constexpr size_t kCount = 6;
  std::vector<__nv_bfloat16> mine(kCount), everyone(size_ * kCount, __float2bfloat16_rn(-1));
  for (size_t i = 0; i < kCount; ++i)
    mine[i] = __float2bfloat16_rn(static_cast<float>(Value(rank_, i)));
  for (size_t i = 0; i < kCount; ++i) everyone[rank_ * kCount + i] = mine[i];
  DeviceArray<__nv_bfloat16> send(mine), recv(std::vector<__nv_bfloat16>(size_ * kCount)),
      in_place(everyone);
  Stream stream;
  ASSERT_NCCL_OK(
      Nccl().AllGather(send.get(), recv.get(), kCount, ncclBfloat16, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().AllGather(in_place.get() + rank_ * kCount, in_place.get(), kCount,
                                  ncclBfloat16, world_, stream.get()));
  stream.Synchronize();
  const std::vector<__nv_bfloat16> out = recv.Read(), out_in_place = in_place.Read();
  for (int r = 0; r < size_; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(__bfloat162float(out[r * kCount + i]), Value(r, i))
          << "rank " << r << ", element " << i;
      EXPECT_EQ(__bfloat162float(out_in_place[r * kCount + i]), Value(r, i)) << "in place";
    }
  }
}

// In place from the last rank; out of place from rank 0, the others passing
// no send buffer (NCCL reads only the root's).
TEST_F(NcclEmulatorTest, BroadcastCopiesTheRootsBuffer) {
  constexpr size_t kCount = 9;
  std::vector<int32_t> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank_, i);
  DeviceArray<int32_t> buffer(mine), send(mine), recv(std::vector<int32_t>(kCount, -1));
  Stream stream;
  const int last = size_ - 1;
  ASSERT_NCCL_OK(
      Nccl().Broadcast(buffer.get(), buffer.get(), kCount, ncclInt32, last, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().Broadcast(rank_ == 0 ? send.get() : nullptr, recv.get(), kCount, ncclInt32,
                                  0, world_, stream.get()));
  stream.Synchronize();
  const std::vector<int32_t> from_last = buffer.Read(), from_first = recv.Read();
  for (size_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(from_last[i], Value(last, i)) << "element " << i;
    EXPECT_EQ(from_first[i], Value(0, i)) << "element " << i;
  }
}

// Every rank sends to the next and receives from the previous in one group:
// as on NCCL the pair cannot deadlock whatever order it is posted in.
TEST_F(NcclEmulatorTest, GroupedRingExchange) {
  constexpr size_t kCount = 11;
  std::vector<int32_t> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank_, i);
  DeviceArray<int32_t> send(mine), recv(std::vector<int32_t>(kCount, -1));
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  Stream stream;
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(Nccl().Send(send.get(), kCount, ncclInt32, next, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv.get(), kCount, ncclInt32, previous, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().GroupEnd());
  stream.Synchronize();
  const std::vector<int32_t> out = recv.Read();
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(out[i], Value(previous, i)) << "element " << i;
}

// A group's send on one stream and receive on another run once both streams
// reach them, as NCCL joins a group's streams: on the even ranks, whose
// sending stream is held, the receive waits although its partner has sent.
TEST_F(NcclEmulatorTest, GroupOnTwoStreamsRunsWhenBothReachIt) {
  if (size_ % 2 != 0) GTEST_SKIP() << "pairs of ranks";
  constexpr size_t kCount = 3;
  const int partner = rank_ ^ 1;
  std::vector<int32_t> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank_, i);
  DeviceArray<int32_t> send(mine), recv(std::vector<int32_t>(kCount, -1));
  Stream sending, receiving;
  Gate gate(sending.get());
  if (rank_ % 2 != 0) gate.Release();
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(Nccl().Send(send.get(), kCount, ncclInt32, partner, world_, sending.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv.get(), kCount, ncclInt32, partner, world_, receiving.get()));
  ASSERT_NCCL_OK(Nccl().GroupEnd());
  Reached received(receiving.get());
  std::this_thread::sleep_for(kSettle);
  if (rank_ % 2 == 0) {
    EXPECT_FALSE(received()) << "the receive ran before its group's send was reached";
  }
  gate.Release();
  receiving.Synchronize();
  sending.Synchronize();
  const std::vector<int32_t> out = recv.Read();
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(out[i], Value(partner, i)) << "element " << i;
}

// Even ranks send first, odd ranks receive first: ungrouped, in matching order.
TEST_F(NcclEmulatorTest, UngroupedPairInMatchingOrder) {
  if (size_ % 2 != 0) GTEST_SKIP() << "pairs of ranks";
  constexpr size_t kCount = 4;
  const int partner = rank_ ^ 1;
  std::vector<float> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = static_cast<float>(Value(rank_, i));
  DeviceArray<float> send(mine), recv(std::vector<float>(kCount, -1));
  Stream stream;
  if (rank_ % 2 == 0) {
    ASSERT_NCCL_OK(Nccl().Send(send.get(), kCount, ncclFloat32, partner, world_, stream.get()));
    ASSERT_NCCL_OK(Nccl().Recv(recv.get(), kCount, ncclFloat32, partner, world_, stream.get()));
  } else {
    ASSERT_NCCL_OK(Nccl().Recv(recv.get(), kCount, ncclFloat32, partner, world_, stream.get()));
    ASSERT_NCCL_OK(Nccl().Send(send.get(), kCount, ncclFloat32, partner, world_, stream.get()));
  }
  stream.Synchronize();
  const std::vector<float> out = recv.Read();
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(out[i], Value(partner, i)) << "element " << i;
}

// Two sends to oneself and two receives from oneself in one group: paired in
// posting order, each a copy.
TEST_F(NcclEmulatorTest, GroupedSendsToOneselfAreCopies) {
  constexpr size_t kCount = 8;
  std::vector<int32_t> first(kCount), second(kCount);
  for (size_t i = 0; i < kCount; ++i) first[i] = Value(rank_, i), second[i] = -Value(rank_, i);
  DeviceArray<int32_t> send_first(first), send_second(second);
  DeviceArray<int32_t> recv_first{std::vector<int32_t>(kCount)},
      recv_second{std::vector<int32_t>(kCount)};
  Stream stream;
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(Nccl().Send(send_first.get(), kCount, ncclInt32, rank_, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().Send(send_second.get(), kCount, ncclInt32, rank_, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv_first.get(), kCount, ncclInt32, rank_, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv_second.get(), kCount, ncclInt32, rank_, world_, stream.get()));
  ASSERT_NCCL_OK(Nccl().GroupEnd());
  stream.Synchronize();
  EXPECT_EQ(recv_first.Read(), first);
  EXPECT_EQ(recv_second.Read(), second);
}

TEST_F(NcclEmulatorTest, SendToOneselfOutsideAGroupIsRefused) {
  DeviceArray<float> buffer(std::vector<float>(4));
  EXPECT_EQ(Nccl().Send(buffer.get(), 4, ncclFloat32, rank_, world_, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(Nccl().GetLastError(world_)).find("to itself outside ncclGroupStart/End"),
            std::string::npos)
      << Nccl().GetLastError(world_);
  EXPECT_EQ(Nccl().Recv(buffer.get(), 4, ncclFloat32, rank_, world_, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(Nccl().GetLastError(world_))
                .find("receives from itself outside ncclGroupStart/End"),
            std::string::npos)
      << Nccl().GetLastError(world_);
  // In a group, a send to oneself needs its receive.
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(Nccl().Send(buffer.get(), 4, ncclFloat32, rank_, world_, nullptr));
  EXPECT_EQ(Nccl().GroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(Nccl().GetLastError(world_))
                .find("Trying to send to self without a matching recv"),
            std::string::npos)
      << Nccl().GetLastError(world_);
}

TEST_F(NcclEmulatorTest, InvalidArgumentsAreRefused) {
  auto expect_refused = [](ncclResult_t result, ncclResult_t expected, const std::string& message) {
    EXPECT_EQ(result, expected) << message;
    EXPECT_NE(std::string(Nccl().GetLastError(nullptr)).find(message), std::string::npos)
        << "last error: " << Nccl().GetLastError(nullptr);
  };
  ncclUniqueId id;
  ASSERT_NCCL_OK(Nccl().GetUniqueId(&id));
  ncclComm_t comm = nullptr;
  expect_refused(Nccl().CommInitRank(nullptr, 2, id, 0), ncclInvalidArgument,
                 "comm argument is NULL");
  expect_refused(Nccl().CommInitRank(&comm, 0, id, 0), ncclInvalidArgument, "invalid comm size 0");
  expect_refused(Nccl().CommInitRank(&comm, 2, id, 2), ncclInvalidArgument, "invalid rank 2");
  expect_refused(Nccl().CommInitRank(&comm, 2, id, -1), ncclInvalidArgument, "invalid rank -1");
  EXPECT_EQ(comm, nullptr);

  DeviceArray<float> buffer(std::vector<float>(4));
  Stream stream;
  expect_refused(Nccl().Send(buffer.get(), 4, ncclFloat32, size_, world_, stream.get()),
                 ncclInvalidArgument, "invalid peer");
  expect_refused(Nccl().Recv(buffer.get(), 4, ncclFloat32, -1, world_, stream.get()),
                 ncclInvalidArgument, "invalid peer -1");
  expect_refused(
      Nccl().Broadcast(buffer.get(), buffer.get(), 4, ncclFloat32, size_, world_, stream.get()),
      ncclInvalidArgument, "invalid root");
  expect_refused(Nccl().AllReduce(buffer.get(), buffer.get(), 4, static_cast<ncclDataType_t>(10),
                                  ncclSum, world_, stream.get()),
                 ncclInvalidArgument, "invalid type 10");
  expect_refused(Nccl().AllReduce(buffer.get(), buffer.get(), 4, ncclFloat32,
                                  static_cast<ncclRedOp_t>(5), world_, stream.get()),
                 ncclInvalidArgument, "invalid reduction operation 5");
  expect_refused(
      Nccl().AllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, nullptr, stream.get()),
      ncclInvalidArgument, "comm argument is NULL");
  expect_refused(Nccl().GroupEnd(), ncclInvalidUsage, "not in a group");

  // A refused call inside a group fails the group, whose other operations are dropped.
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(
      Nccl().Send(buffer.get(), 4, ncclFloat32, (rank_ + 1) % size_, world_, stream.get()));
  EXPECT_EQ(Nccl().Recv(buffer.get(), 4, ncclFloat32, size_, world_, stream.get()),
            ncclInvalidArgument);
  expect_refused(Nccl().GroupEnd(), ncclInvalidArgument, "invalid peer");
}

// ncclAllReduce returns before it runs: its stream is held, its output unchanged.
TEST_F(NcclEmulatorTest, AllReduceReturnsBeforeItRuns) {
  constexpr size_t kCount = 5;
  std::vector<float> input(kCount);
  for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<float>(Value(rank_, i));
  DeviceArray<float> send(input), recv(std::vector<float>(kCount, -1));
  Stream stream;
  Gate gate(stream.get());
  ASSERT_NCCL_OK(
      Nccl().AllReduce(send.get(), recv.get(), kCount, ncclFloat32, ncclSum, world_, stream.get()));
  std::this_thread::sleep_for(kSettle);
  EXPECT_EQ(recv.Read(), std::vector<float>(kCount, -1));
  gate.Release();
  WaitForStream(stream.get());
  const std::vector<float> out = recv.Read();
  for (size_t i = 0; i < kCount; ++i)
    EXPECT_EQ(out[i], Reduced<float>(ncclSum, size_, i)) << "element " << i;
}

// A communicator's operations run in posting order across streams: the second
// all-reduce, on a free stream, waits for the first, on a held one.
TEST_F(NcclEmulatorTest, OneCommunicatorsOperationsRunInPostingOrder) {
  std::vector<int32_t> input(3);
  for (size_t i = 0; i < input.size(); ++i) input[i] = Value(rank_, i);
  DeviceArray<int32_t> first(input), second(input);
  Stream held, free;
  Gate gate(held.get());
  ASSERT_NCCL_OK(
      Nccl().AllReduce(first.get(), first.get(), 3, ncclInt32, ncclSum, world_, held.get()));
  ASSERT_NCCL_OK(
      Nccl().AllReduce(second.get(), second.get(), 3, ncclInt32, ncclMax, world_, free.get()));
  std::this_thread::sleep_for(kSettle);
  EXPECT_EQ(second.Read(), input);
  gate.Release();
  held.Synchronize();
  free.Synchronize();
  const std::vector<int32_t> sums = first.Read(), maxima = second.Read();
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_EQ(sums[i], Reduced<int32_t>(ncclSum, size_, i));
    EXPECT_EQ(maxima[i], Reduced<int32_t>(ncclMax, size_, i));
  }
}

// Outside a group a send ends only once its peer receives: two ranks that
// each send to the other first deadlock, as on NCCL, until the abort.
TEST_F(NcclEmulatorTest, LoneSendsToEachOtherDeadlockUntilAborted) {
  if (size_ % 2 != 0) GTEST_SKIP() << "pairs of ranks";
  ncclComm_t comm = MakeComm(WorldRanks());
  ASSERT_NE(comm, nullptr);
  DeviceArray<float> send(std::vector<float>(4)), recv(std::vector<float>(4));
  Stream stream;
  const int partner = rank_ ^ 1;
  ASSERT_NCCL_OK(Nccl().Send(send.get(), 4, ncclFloat32, partner, comm, stream.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv.get(), 4, ncclFloat32, partner, comm, stream.get()));
  Reached after_both(stream.get());
  std::this_thread::sleep_for(kSettle);
  EXPECT_FALSE(after_both()) << "the sends completed without a receive posted";
  ASSERT_NCCL_OK(Nccl().CommAbort(comm));
  WaitForStream(stream.get());
  EXPECT_TRUE(after_both());
}

TEST_F(NcclEmulatorTest, AbortEndsAReceiveThatNothingMatches) {
  ncclComm_t comm = MakeComm(WorldRanks());
  ASSERT_NE(comm, nullptr);
  DeviceArray<float> recv(std::vector<float>(4, -1));
  Stream stream;
  ASSERT_NCCL_OK(Nccl().Recv(recv.get(), 4, ncclFloat32, (rank_ + 1) % size_, comm, stream.get()));
  std::this_thread::sleep_for(kSettle);
  ASSERT_NCCL_OK(Nccl().CommAbort(comm));
  WaitForStream(stream.get());
  EXPECT_EQ(recv.Read(), std::vector<float>(4, -1));
}

// ncclCommDestroy waits for the communicator's posted work.
TEST_F(NcclEmulatorTest, DestroyWaitsForPostedOperations) {
  ncclComm_t comm = MakeComm(WorldRanks());
  ASSERT_NE(comm, nullptr);
  std::vector<float> input(4);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(Value(rank_, i));
  DeviceArray<float> buffer(input);
  Stream stream;
  Gate gate(stream.get());
  ASSERT_NCCL_OK(
      Nccl().AllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclMax, comm, stream.get()));
  std::atomic<bool> destroyed{false};
  std::thread destroy([&] {
    EXPECT_EQ(Nccl().CommDestroy(comm), ncclSuccess);
    destroyed = true;
  });
  std::this_thread::sleep_for(kSettle);
  EXPECT_FALSE(destroyed);
  gate.Release();
  destroy.join();
  stream.Synchronize();
  const std::vector<float> out = buffer.Read();
  for (size_t i = 0; i < input.size(); ++i) EXPECT_EQ(out[i], Reduced<float>(ncclMax, size_, i));
}

// A receive posted for another size than its send gets: an asynchronous error
// (the larger message truncated, the smaller one short), not a result.
TEST_F(NcclEmulatorTest, SizeMismatchIsAnAsynchronousError) {
  if (size_ % 2 != 0) GTEST_SKIP() << "pairs of ranks";
  ncclComm_t comm = MakeComm(WorldRanks());
  ASSERT_NE(comm, nullptr);
  const int partner = rank_ ^ 1;
  // Even ranks send and expect 8 elements, odd ranks 4: the odd ranks'
  // receives are too short, the even ranks' get too little.
  const size_t count = rank_ % 2 == 0 ? 8 : 4;
  DeviceArray<float> send(std::vector<float>(count, 1)), recv(std::vector<float>(count, -1));
  Stream stream;
  ASSERT_NCCL_OK(Nccl().GroupStart());
  ASSERT_NCCL_OK(Nccl().Send(send.get(), count, ncclFloat32, partner, comm, stream.get()));
  ASSERT_NCCL_OK(Nccl().Recv(recv.get(), count, ncclFloat32, partner, comm, stream.get()));
  ASSERT_NCCL_OK(Nccl().GroupEnd());
  stream.Synchronize();
  ncclResult_t async_error = ncclSuccess;
  ASSERT_NCCL_OK(Nccl().CommGetAsyncError(comm, &async_error));
  EXPECT_EQ(async_error, ncclInvalidUsage);
  EXPECT_NE(std::string(Nccl().GetLastError(comm)).find("ncclRecv"), std::string::npos)
      << Nccl().GetLastError(comm);
  EXPECT_EQ(Nccl().CommDestroy(comm), ncclSuccess);
}

}  // namespace
}  // namespace tetra::emulator
