#include "launch/lost_ranks.h"

#include <regex>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tetra {
namespace {

constexpr int kMaxRanks = 1 << 20;  // a garbled range names no more

bool Matches(std::string_view line, const std::regex& pattern, std::cmatch& match) {
  return std::regex_search(line.data(), line.data() + line.size(), match, pattern);
}

}  // namespace

void LostRankParser::Add(LostRank lost) {
  // Each rank that timed out names the same missing ranks.
  for (const LostRank& known : lost_) {
    if (known.host == lost.host && known.rank == lost.rank) return;
  }
  lost_.push_back(std::move(lost));
}

bool LostRankParser::Line(std::string_view line) {
  if (OpenMpiLine(line) || ProbeLine(line) || SrunLine(line)) return true;
  // A rank's own error (a communication timeout among them), and mpirun's
  // word that it is aborting the job.
  return line.starts_with("tetra: error:") || line.find("has been aborted") != line.npos ||
         line.find("exited with non-zero status") != line.npos;
}

bool LostRankParser::OpenMpiLine(std::string_view line) {
  // "mpirun noticed that process rank 1 with PID 77 on node a exited on signal 9 (Killed)."
  static const std::regex kSignal(
      R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+( \([^)]*\))?))");
  // "ORTE has lost communication with a remote daemon." then "Remote daemon: [[..],1] on node b"
  static const std::regex kDaemon(R"(Remote daemon\s*:.* on node (\S+))");
  static const std::regex kPeerHost(R"(^\s*Peer host:\s*(\S+))");
  std::cmatch m;
  if (Matches(line, kSignal, m)) {
    Add({.host = m[2].str(),
         .rank = std::stoi(m[1].str()),
         .how = absl::StrCat("signal ", m[3].str())});
    return true;
  }
  if (line.find("lost communication with a remote daemon") != std::string_view::npos) {
    open_block_ = Block::kDaemonLost;
    return true;
  }
  // Open MPI's TCP transport: "An MPI communication peer process has
  // unexpectedly disconnected." then "  Peer host:  10.77.0.2".
  if (line.find("peer process has unexpectedly disconnected") != std::string_view::npos) {
    open_block_ = Block::kPeerDisconnected;
    return true;
  }
  if (open_block_ == Block::kDaemonLost && Matches(line, kDaemon, m)) {
    open_block_ = Block::kNone;
    Add({.host = m[1].str(), .how = "its daemon was lost"});
    return true;
  }
  if (open_block_ == Block::kPeerDisconnected && Matches(line, kPeerHost, m)) {
    open_block_ = Block::kNone;
    Add({.host = m[1].str(), .how = "a process on it disconnected"});
    return true;
  }
  return false;
}

bool LostRankParser::ProbeLine(std::string_view line) {
  // A rank's timed-out wait: "...; ranks 2, 3 on host b did not answer a liveness probe ..."
  static const std::regex kGroup(
      R"((?:rank|ranks) ([0-9, ]+) on host (\S+?)(?:;| did not answer))");
  if (line.find("did not answer a liveness probe") == std::string_view::npos) return false;
  const std::string text(line);
  for (std::sregex_iterator it(text.begin(), text.end(), kGroup), end; it != end; ++it) {
    for (absl::string_view rank : absl::StrSplit((*it)[1].str(), ',', absl::SkipWhitespace())) {
      int r = 0;
      if (absl::SimpleAtoi(rank, &r)) {
        Add({.host = (*it)[2].str(), .rank = r, .how = "did not answer a liveness probe"});
      }
    }
  }
  return true;
}

bool LostRankParser::SrunLine(std::string_view line) {
  // "srun: error: node02: tasks 2-3: Killed"; "...: task 1: Exited with exit code 1" ended by
  // itself.
  static const std::regex kTasks(R"(srun: error: (\S+): tasks? ([0-9,-]+): (.*)$)");
  static const std::regex kNode(R"(srun: error: Node failure on (\S+))");
  std::cmatch m;
  if (Matches(line, kNode, m)) {
    Add({.host = m[1].str(), .how = "node failure"});
    return true;
  }
  if (!Matches(line, kTasks, m) || m[3].str().rfind("Exited with exit code", 0) == 0) return false;
  for (absl::string_view range : absl::StrSplit(m[2].str(), ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
    int lo = 0, hi = 0;
    if (!absl::SimpleAtoi(ends.front(), &lo) || !absl::SimpleAtoi(ends.back(), &hi) ||
        hi - lo > kMaxRanks) {
      continue;
    }
    for (int rank = lo; rank <= hi; ++rank) {
      Add({.host = m[1].str(), .rank = rank, .how = m[3].str()});
    }
  }
  return true;
}

std::string DescribeLost(const std::vector<LostRank>& lost) {
  std::string out;
  for (const LostRank& l : lost) {
    absl::StrAppend(&out, out.empty() ? "" : "; ",
                    l.rank >= 0 ? absl::StrCat("rank ", l.rank, " on host ") : "host ", l.host,
                    " (", l.how, ")");
  }
  return out;
}

}  // namespace tetra
