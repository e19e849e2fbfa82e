#include "kernels/cuda/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/device.h"

namespace tetra::cuda {
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
  bool enabled() const { return enabled_; }
  void Add(const char* op, double seconds) {
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
    std::fprintf(stderr, "tetra op profile (device ops, synchronised): %.3f s\n", total);
    for (const auto& [op, t] : rows) {
      std::fprintf(stderr, "  %-24s %8lld calls %10.4f s %6.1f%%\n", op.c_str(),
                   static_cast<long long>(t.calls), t.seconds, 100.0 * t.seconds / total);
    }
  }

 private:
  Profile() : enabled_(std::getenv("TETRA_OP_PROFILE") != nullptr) {}
  const bool enabled_;
  std::mutex mutex_;
  std::map<std::string, Totals> totals_;
};

}  // namespace

OpTimer::OpTimer(const char* op) : op_(Profile::Get().enabled() ? op : nullptr) {
  if (op_ == nullptr) return;
  Synchronize();
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  if (op_ == nullptr) return;
  Synchronize();
  Profile::Get().Add(
      op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace tetra::cuda
