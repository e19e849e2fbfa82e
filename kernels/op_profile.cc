#include "kernels/op_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/device_work.h"
#include "kernels/op_list.h"

#if TETRA_HAVE_CUDA
#include "core/cuda/device.h"
#endif

namespace tetra::ops {
namespace {

struct Totals {
  int64_t calls = 0;
  double seconds = 0;
};

// The per-op totals, printed when the process ends.
class Profile {
 public:
  static Profile& Get() {
    static Profile profile;
    return profile;
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void Enable() { enabled_ = true; }
  int64_t Calls(const char* op) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = totals_.find(op);
    return it == totals_.end() ? 0 : it->second.calls;
  }
  void Add(const char* op, double seconds) {
    KindOfOp(op);  // every op profiled is listed, with its kind
    std::lock_guard<std::mutex> lock(mutex_);
    Totals& t = totals_[op];
    ++t.calls;
    t.seconds += seconds;
  }
  ~Profile() {
    if (totals_.empty()) return;
    std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& [op, t] : rows) total += t.seconds;
    std::fprintf(stderr, "tetra op profile (ops serialised with the device): %.3f s\n", total);
    for (const auto& [op, t] : rows) {
      std::fprintf(stderr, "  %-24s %8lld calls %10.4f s %6.1f%%\n", op.c_str(),
                   static_cast<long long>(t.calls), t.seconds, 100.0 * t.seconds / total);
    }
    std::map<std::string, double> kinds;
    for (const auto& [op, t] : rows) kinds[OpKindName(KindOfOp(op))] += t.seconds;
    std::vector<std::pair<std::string, double>> by_kind(kinds.begin(), kinds.end());
    std::sort(by_kind.begin(), by_kind.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    // Collectives run beside these ops and are not timed here: a one-GPU run has none.
    std::fprintf(stderr, "tetra op profile by kind (communication not included):\n");
    for (const auto& [kind, seconds] : by_kind) {
      std::fprintf(stderr, "  %-26s %10.4f s %6.1f%%\n", kind.c_str(), seconds,
                   100.0 * seconds / total);
    }
    const DeviceWorkCounts work = DeviceWorkSoFar();
    if (work.launches > 0) {
      std::fprintf(stderr,
                   "tetra device work of the process: %lld launches, %lld host waits, %lld "
                   "device allocations (each step's are its metrics device_launches, "
                   "host_waits and device_allocations)\n",
                   static_cast<long long>(work.launches), static_cast<long long>(work.host_waits),
                   static_cast<long long>(work.allocations));
    }
  }

 private:
  Profile() : enabled_(std::getenv("TETRA_OP_PROFILE") != nullptr) {}
  std::atomic<bool> enabled_;
  std::mutex mutex_;
  std::map<std::string, Totals> totals_;
};

// Waits for the device's queued work when `device` is one.
void WaitFor(DeviceType device) {
#if TETRA_HAVE_CUDA
  if (device == DeviceType::kCUDA) cuda::SynchronizeUncounted();
#else
  (void)device;
#endif
}

}  // namespace

OpTimer::OpTimer(const char* op, DeviceType device)
    : op_(Profile::Get().enabled() ? op : nullptr), device_(device) {
  if (op_ == nullptr) return;
  WaitFor(device_);
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  if (op_ == nullptr) return;
  WaitFor(device_);
  Profile::Get().Add(
      op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

void EnableOpProfile() { Profile::Get().Enable(); }

int64_t OpProfileCalls(const char* op) { return Profile::Get().Calls(op); }

}  // namespace tetra::ops
