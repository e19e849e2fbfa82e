#include "emulator/kernel_engine.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cstdio>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "device_builtins.h"
#include "emulator/emulated_device.h"
#include "emulator/failure.h"

namespace tetra::emulator {
namespace {

namespace context = boost::context;

// Room for a CUDA thread's locals and a device printf.
constexpr size_t kStackBytes = 128 << 10;

// Fiber stacks for this host thread, reused from block to block; each has an
// inaccessible page below it, so an overflow faults instead of corrupting.
class StackPool {
 public:
  ~StackPool() {
    for (const context::stack_context& s : free_) {
      munmap(static_cast<char*>(s.sp) - s.size - Page(), s.size + Page());
    }
  }
  context::stack_context Take() {
    if (free_.empty()) {
      void* mapping = mmap(nullptr, kStackBytes + Page(), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mapping == MAP_FAILED) Fail("cannot map a fiber stack for a CUDA thread");
      mprotect(mapping, Page(), PROT_NONE);
      context::stack_context s;
      s.size = kStackBytes;
      s.sp = static_cast<char*>(mapping) + Page() + kStackBytes;
      return s;
    }
    context::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void Give(const context::stack_context& s) { free_.push_back(s); }

 private:
  static size_t Page() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }
  std::vector<context::stack_context> free_;
};

thread_local StackPool stacks;

// Boost.Context's stack-allocator concept over the pool.
struct PooledStack {
  context::stack_context allocate() { return stacks.Take(); }
  void deallocate(context::stack_context& s) noexcept { stacks.Give(s); }
};

// The threads' order: any well-mixed sequence will do, and this one is cheap.
struct SplitMix64 {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

enum class State { kReady, kBarrier, kWarp, kDone };

struct CudaThread {
  ThreadIndices indices;
  int lane = 0, warp = 0;
  State state = State::kReady;
  context::fiber fiber;      // the thread while it is suspended
  context::fiber scheduler;  // while it runs: the way back to the block's loop
  WarpOp op = WarpOp::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int source = 0;
};

struct Block {
  const KernelRun* run;
  std::vector<CudaThread> threads;
  char* shared;
  int at_barrier = 0, exited = 0;
  std::vector<unsigned> arrived;  // per warp: the lanes waiting at a warp operation
};

// initial-exec: read at every built-in, and the library is loaded with the
// program, so its thread-locals need no __tls_get_addr call.
[[gnu::tls_model("initial-exec")]] thread_local Block* current_block = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local CudaThread* current_thread = nullptr;

std::string Where(const dim3& d) { return absl::StrFormat("(%u, %u, %u)", d.x, d.y, d.z); }

std::string Describe(const CudaThread& t) {
  return absl::StrFormat("thread %s of block %s", Where(t.indices.thread_idx),
                         Where(t.indices.block_idx));
}

const char* OpName(WarpOp op) {
  switch (op) {
    case WarpOp::kSyncWarp:
      return "__syncwarp";
    case WarpOp::kShuffle:
      return "__shfl_sync";
    case WarpOp::kShuffleXor:
      return "__shfl_xor_sync";
  }
  return "a warp operation";
}

CudaThread& Current(const char* what) {
  if (current_thread == nullptr) Fail(absl::StrFormat("%s outside a kernel", what));
  return *current_thread;
}

void Yield(CudaThread& t) { t.scheduler = std::move(t.scheduler).resume(); }

// Completes t's warp operation if every lane of its mask has arrived at it:
// each lane gets its result and is ready to run. Fails on a lane that cannot
// arrive (absent, exited, waiting at another operation).
bool TryCompleteWarpOperation(Block& block, const CudaThread& t) {
  std::vector<CudaThread>& threads = block.threads;
  const int n = static_cast<int>(threads.size()), base = t.warp * 32;
  bool all_arrived = true;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(t.mask >> lane & 1u)) continue;
    if (base + lane >= n) {
      Fail(absl::StrFormat("%s of %s names lane %d in mask %#x, but warp %d has %d lanes",
                           OpName(t.op), Describe(t), lane, t.mask, t.warp, n - base));
    }
    const CudaThread& u = threads[base + lane];
    if (u.state == State::kDone) {
      Fail(absl::StrFormat("%s of %s names lane %d in mask %#x, which has exited", OpName(t.op),
                           Describe(t), lane, t.mask));
    }
    if (u.state == State::kWarp && (u.op != t.op || u.mask != t.mask)) {
      Fail(
          absl::StrFormat("lanes %d and %d of warp %d meet at different warp operations: %s "
                          "with mask %#x and %s with mask %#x",
                          t.lane, lane, t.warp, OpName(t.op), t.mask, OpName(u.op), u.mask));
    }
    if (u.state != State::kWarp) all_arrived = false;
  }
  if (!all_arrived) return false;
  const unsigned mask = t.mask;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    CudaThread& u = threads[base + lane];
    if (u.op != WarpOp::kSyncWarp && !(mask >> u.source & 1u)) {
      Fail(absl::StrFormat("%s of %s reads lane %d, which is not in its mask %#x", OpName(u.op),
                           Describe(u), u.source, mask));
    }
    u.result = threads[base + u.source].value;
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (mask >> lane & 1u) threads[base + lane].state = State::kReady;
  }
  block.arrived[t.warp] &= ~mask;
  return true;
}

[[noreturn]] void FailDeadlock(const Block& block) {
  int at_barrier = 0, at_warp = 0, exited = 0;
  std::string example;
  for (const CudaThread& t : block.threads) {
    at_barrier += t.state == State::kBarrier;
    exited += t.state == State::kDone;
    if (t.state != State::kWarp) continue;
    ++at_warp;
    if (!example.empty()) continue;
    for (int lane = 0; lane < 32; ++lane) {
      const CudaThread& u = block.threads[t.warp * 32 + lane];
      if ((t.mask >> lane & 1u) && u.state == State::kBarrier) {
        example = absl::StrFormat(
            "; %s waits at %s (mask %#x) for lane %d, which waits at "
            "__syncthreads",
            Describe(t), OpName(t.op), t.mask, lane);
        break;
      }
    }
  }
  Fail(
      absl::StrFormat("the block's threads wait for each other forever: %d at __syncthreads, %d "
                      "at warp operations, %d exited%s",
                      at_barrier, at_warp, exited, example));
}

void ReleaseBarrier(Block& block) {
  for (CudaThread& t : block.threads) {
    if (t.state == State::kBarrier) t.state = State::kReady;
  }
  block.at_barrier = 0;
}

void RunBlock(Block& block, const dim3& block_idx, SplitMix64& rng) {
  const KernelRun& run = *block.run;
  const int n = static_cast<int>(run.block.x * run.block.y * run.block.z);
  block.threads.clear();
  block.threads.resize(n);
  block.at_barrier = block.exited = 0;
  block.arrived.assign((n + 31) / 32, 0u);
  for (int i = 0; i < n; ++i) {
    CudaThread& t = block.threads[i];
    t.indices = {
        dim3(i % run.block.x, i / run.block.x % run.block.y, i / (run.block.x * run.block.y)),
        block_idx, run.block, run.grid};
    t.lane = i % 32;
    t.warp = i / 32;
    t.fiber = context::fiber(std::allocator_arg, PooledStack{},
                             [&t, &run, &block](context::fiber&& scheduler) {
                               t.scheduler = std::move(scheduler);
                               run.body();
                               t.state = State::kDone;
                               ++block.exited;
                               return std::move(t.scheduler);
                             });
  }
  // Shared memory starts as garbage on a GPU; a pattern makes a read of it show.
  std::fill(block.shared, block.shared + run.shared_bytes, static_cast<char>(0xff));
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  while (true) {
    for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
    for (int i : order) {
      CudaThread& t = block.threads[i];
      if (t.state != State::kReady) continue;
      current_thread = &t;
      t.fiber = std::move(t.fiber).resume();
      current_thread = nullptr;
    }
    if (block.exited == n) return;
    if (std::any_of(block.threads.begin(), block.threads.end(),
                    [](const CudaThread& t) { return t.state == State::kReady; })) {
      continue;
    }
    // Exited threads do not hold a barrier up, as on the hardware.
    if (block.at_barrier + block.exited != n) {
      for (const CudaThread& t : block.threads) {
        if (t.state == State::kWarp) TryCompleteWarpOperation(block, t);  // fails saying why not
      }
      FailDeadlock(block);
    }
    ReleaseBarrier(block);
  }
}

// A fault inside a kernel (a read or write beyond a device allocation's
// guard page, into freed or host memory, or past a CUDA thread's stack) is
// the device's illegal-address error: said with the kernel and thread, then
// the process ends. Faults elsewhere go to the handler that was there before.
struct sigaction previous_fault_action;

void OnFault(int, siginfo_t* info, void*) {
  if (current_thread == nullptr) {
    sigaction(SIGSEGV, &previous_fault_action, nullptr);
    return;  // the fault repeats, now with the previous handling
  }
  char message[1024];
  const int n =
      std::snprintf(message, sizeof(message),
                    "tetra emulated GPU: illegal address %p (outside every device "
                    "allocation, or past a CUDA thread's stack) in %s, thread (%u, %u, "
                    "%u) of block (%u, %u, %u)\n",
                    info->si_addr, Running().c_str(), current_thread->indices.thread_idx.x,
                    current_thread->indices.thread_idx.y, current_thread->indices.thread_idx.z,
                    current_thread->indices.block_idx.x, current_thread->indices.block_idx.y,
                    current_thread->indices.block_idx.z);
  if (n > 0) (void)!write(STDERR_FILENO, message, std::min<size_t>(n, sizeof(message) - 1));
  std::abort();
}

// The fault handler runs on a stack of its own: the fault may be a fiber's
// stack overflow.
void CatchFaultsOnThisThread() {
  thread_local std::vector<char> signal_stack;
  if (!signal_stack.empty()) return;
  signal_stack.resize(64 << 10);
  stack_t stack = {};
  stack.ss_sp = signal_stack.data();
  stack.ss_size = signal_stack.size();
  sigaltstack(&stack, nullptr);
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = OnFault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_fault_action);
    return true;
  }();
  (void)installed;
}

}  // namespace

void RunKernel(const KernelRun& run) {
  CatchFaultsOnThisThread();
  thread_local std::vector<char> shared;
  if (shared.size() < run.shared_bytes) shared.resize(run.shared_bytes);
  Block block{&run, {}, shared.data(), 0, 0, {}};
  current_block = &block;
  SplitMix64 rng{run.seed};
  for (unsigned z = 0; z < run.grid.z; ++z) {
    for (unsigned y = 0; y < run.grid.y; ++y) {
      for (unsigned x = 0; x < run.grid.x; ++x) RunBlock(block, dim3(x, y, z), rng);
    }
  }
  current_block = nullptr;
}

const ThreadIndices& CurrentIndices() { return Current("a built-in index").indices; }

int CurrentLane() { return Current("a warp operation").lane; }

// The last thread to arrive releases the others and goes on without a switch.
void SyncThreads() {
  CudaThread& t = Current("__syncthreads");
  t.state = State::kBarrier;
  Block& block = *current_block;
  if (++block.at_barrier + block.exited == static_cast<int>(block.threads.size())) {
    ReleaseBarrier(block);
    return;
  }
  Yield(t);
}

uint64_t WarpExchange(WarpOp op, unsigned mask, uint64_t value, int source_lane) {
  CudaThread& t = Current(OpName(op));
  if (!(mask >> t.lane & 1u)) {
    Fail(absl::StrFormat("%s of %s (lane %d) has mask %#x, which leaves the lane out", OpName(op),
                         Describe(t), t.lane, mask));
  }
  t.state = State::kWarp;
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.source = source_lane;
  // The last lane to arrive completes the operation and goes on without a switch.
  Block& block = *current_block;
  unsigned& arrived = block.arrived[t.warp];
  arrived |= 1u << t.lane;
  if ((arrived & mask) != mask || !TryCompleteWarpOperation(block, t)) Yield(t);
  return t.result;
}

void Trap() { Fail(absl::StrFormat("__trap() in %s", Describe(Current("__trap")))); }

void* DynamicSharedMemory() {
  Current("extern __shared__ memory");
  return current_block->shared;
}

}  // namespace tetra::emulator
