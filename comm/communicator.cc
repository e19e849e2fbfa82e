#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/timer.h"

namespace tetra {
namespace {

// Polls before the first sleep: short operations finish inside the spin
// without paying a sleep's wake-up latency. Each spin yields the core, so
// oversubscribed ranks (tests: 8 ranks on 2 cores) let their peers run.
constexpr int kSpinPolls = 1000;
constexpr std::chrono::microseconds kFirstSleep{1};
constexpr std::chrono::microseconds kMaxSleep{1000};
// Longest rank list a message spells out before shortening it.
constexpr size_t kMaxListedRanks = 16;

std::function<void()>& AbortHandler() {
  static std::function<void()> handler = [] { _exit(1); };
  return handler;
}

// {"0-3", "8", "10"}: runs of three or more consecutive ranks as ranges.
std::vector<std::string> RankRanges(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j >= i + 2) {
      parts.push_back(absl::StrCat(ranks[i], "-", ranks[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(absl::StrCat(ranks[k]));
    }
    i = j + 1;
  }
  return parts;
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMean: return "mean";
  }
  return "?";
}

namespace {
// Every rank's `value`, in rank order.
std::vector<double> GatherDoubles(Communicator& group, double value) {
  static_assert(sizeof(double) == 2 * sizeof(int32_t));
  std::vector<double> values(group.size());
  group.AllGather(&value, values.data(), 2, DType::kI32);
  return values;
}
}  // namespace

double SumOverRanks(Communicator& group, double value) {
  if (group.size() == 1) return value;
  double sum = 0;
  for (double v : GatherDoubles(group, value)) sum += v;
  return sum;
}

double MaxOverRanks(Communicator& group, double value) {
  if (group.size() == 1) return value;
  const std::vector<double> values = GatherDoubles(group, value);
  return *std::max_element(values.begin(), values.end());
}

absl::Status AgreeOnStatus(Communicator& group, absl::Status status) {
  // The lowest failed rank, as -max(-rank); group.size() when none failed.
  const int failed = static_cast<int>(
      -MaxOverRanks(group, -(status.ok() ? group.size() : group.rank())));
  if (!status.ok() || failed == group.size()) return status;
  return absl::AbortedError(absl::StrCat("rank ", group.ranks()[failed],
                                         " failed (see its error above)"));
}

std::string DescribeGroup(const Communicator& comm) {
  std::vector<std::string> parts = RankRanges(comm.ranks());
  std::string list;
  if (parts.size() > kMaxListedRanks) {
    parts.resize(kMaxListedRanks / 2);
    list = absl::StrCat(absl::StrJoin(parts, ", "), ", ..., ", comm.ranks().back(), "; ",
                        comm.size(), " ranks");
  } else {
    list = absl::StrJoin(parts, ", ");
  }
  return absl::StrCat("group ", comm.name(), " (world ranks ", list, ")");
}

std::function<void()> SetCommAbortHandler(std::function<void()> handler) {
  TETRA_CHECK(handler != nullptr) << "the comm abort handler must be callable";
  return std::exchange(AbortHandler(), std::move(handler));
}

CommHandle::CommHandle(std::function<bool()> poll, std::function<std::string()> describe,
                       double timeout_s, std::function<void()> on_timeout)
    : poll_(std::move(poll)),
      describe_(std::move(describe)),
      on_timeout_(std::move(on_timeout)),
      timeout_s_(timeout_s),
      done_(false) {
  TETRA_CHECK(poll_ != nullptr && describe_ != nullptr) << "a pending CommHandle needs poll and describe";
  TETRA_CHECK(timeout_s_ > 0) << "comm timeout must be positive, got " << timeout_s_ << " s";
}

CommHandle::CommHandle(CommHandle&& other) noexcept
    : poll_(std::move(other.poll_)),
      describe_(std::move(other.describe_)),
      on_timeout_(std::move(other.on_timeout_)),
      timeout_s_(other.timeout_s_),
      done_(std::exchange(other.done_, true)) {}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    Wait();
    poll_ = std::move(other.poll_);
    describe_ = std::move(other.describe_);
    on_timeout_ = std::move(other.on_timeout_);
    timeout_s_ = other.timeout_s_;
    done_ = std::exchange(other.done_, true);
  }
  return *this;
}

CommHandle::~CommHandle() { Wait(); }

bool CommHandle::Test() {
  if (!done_ && poll_()) {
    done_ = true;
    poll_ = nullptr;
    describe_ = nullptr;
    on_timeout_ = nullptr;
  }
  return done_;
}

void CommHandle::Wait() {
  if (done_) return;
  Timer timer;
  auto sleep = kFirstSleep;
  for (int polls = 0; !Test(); ++polls) {
    if (polls < kSpinPolls) {
      std::this_thread::yield();
      continue;
    }
    const double waited = timer.Seconds();
    if (waited > timeout_s_) {
      const int rank = LogRank();
      const std::string who = rank >= 0 ? absl::StrCat("rank ", rank, " (world)") : "this process";
      const std::string message = absl::StrFormat(
          "tetra: error: %s waited %.1f s for %s without completing; a rank of the group did not "
          "join or is stuck\nhint: check that every rank of the group issues the same operations "
          "in the same order; if it is only slow, raise parallel.comm_timeout_s (now %g s)\n",
          who, waited, describe_(), timeout_s_);
      std::fputs(message.c_str(), stderr);
      std::fflush(stderr);
      if (on_timeout_) on_timeout_();
      AbortHandler()();
      _exit(1);
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

}  // namespace tetra
