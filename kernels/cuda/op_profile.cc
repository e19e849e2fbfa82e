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

// The kind of work an op of the op API is, for the profile's summary (names
// are the ops.cc function names; the first matching prefix wins).
const char* Kind(const std::string& op) {
  static constexpr std::pair<const char*, const char*> kKinds[] = {
      {"Linear", "GEMM"},
      {"Attention", "attention"},
      {"RmsNorm", "norms"},
      {"AddRmsNorm", "norms"},
      {"CrossEntropy", "cross-entropy"},
      {"AdamW", "optimizer"},
      {"SumOfSquares", "optimizer"},
      {"WeightedSumOfSquares", "optimizer"},
      {"Scale", "optimizer"},  // gradient clipping
      {"Router", "MoE routing and dispatch"},
      {"SequenceBalanceStats", "MoE routing and dispatch"},
      {"SequenceBalanceLoss", "MoE routing and dispatch"},
      {"CountExpertLoads", "MoE routing and dispatch"},
      {"UpdateRouterBias", "MoE routing and dispatch"},
      {"DispatchOrder", "MoE routing and dispatch"},
      {"GatherRows", "MoE routing and dispatch"},
      {"CombineRows", "MoE routing and dispatch"},
  };
  for (const auto& [prefix, kind] : kKinds) {
    if (op.rfind(prefix, 0) == 0) return kind;
  }
  return "elementwise";  // embedding, RoPE, SwiGLU, adds, casts
}

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
    std::map<std::string, double> kinds;
    for (const auto& [op, t] : rows) kinds[Kind(op)] += t.seconds;
    std::vector<std::pair<std::string, double>> by_kind(kinds.begin(), kinds.end());
    std::sort(by_kind.begin(), by_kind.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    // Collectives run beside these ops and are not timed here: a one-GPU run has none.
    std::fprintf(stderr, "tetra op profile by kind (communication not included):\n");
    for (const auto& [kind, seconds] : by_kind) {
      std::fprintf(stderr, "  %-26s %10.4f s %6.1f%%\n", kind.c_str(), seconds, 100.0 * seconds / total);
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
