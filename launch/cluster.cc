#include "launch/cluster.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// The standard output of `command` run by the shell; an error when it fails.
absl::StatusOr<std::string> OutputOf(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return UserError(absl::StrCat("cannot run the host-discovery script ", UserText(command)),
                     "pass --host-discovery-script an executable that prints HOST[:SLOTS] lines");
  }
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    return UserError(absl::StrCat("the host-discovery script ", UserText(command),
                                  " failed (wait status ", status, ")"),
                     "make it print the available hosts, one HOST[:SLOTS] per line, and exit 0");
  }
  return out;
}

}  // namespace

absl::StatusOr<Cluster> Cluster::Create(const ClusterSource& source) {
  Cluster cluster;
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (!source.discovery_script.empty()) {
    cluster.discovery_script_ = source.discovery_script;
    RETURN_IF_ERROR(cluster.Rediscover());
  } else if (!source.hostfile.empty()) {
    ASSIGN_OR_RETURN(const std::string text,
                     ReadInputFile(source.hostfile, "hostfile",
                                   "pass --hostfile a file of lines \"HOST slots=N\""));
    ASSIGN_OR_RETURN(cluster.hosts_, ParseHostfile(text, source.hostfile));
  } else if (nodelist != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<std::string> nodes, ExpandSlurmNodelist(nodelist));
    const char* per_node = std::getenv("SLURM_NTASKS_PER_NODE");  // "4" or "4(x2)"
    const int n = static_cast<int>(nodes.size());
    const int slots = per_node != nullptr && std::atoi(per_node) > 0 ? std::atoi(per_node)
                                                                     : (source.np + n - 1) / n;
    for (const std::string& node : nodes) cluster.hosts_.push_back({node, slots});
    cluster.slurm_ = true;
  } else {
    cluster.hosts_ = {{"localhost", source.np}};
  }
  return cluster;
}

std::string Cluster::HostOfRank(int rank) const {
  for (const Host& host : hosts_) {
    if (rank < host.slots) return host.name;
    rank -= host.slots;
  }
  return "";
}

void Cluster::DropLost(const std::vector<LostRank>& lost, int world) {
  if (hosts_.size() == 1 && discovery_script_.empty()) {
    std::set<int> ranks;  // a rank may be reported twice
    for (const LostRank& l : lost) {
      if (l.rank >= 0) ranks.insert(l.rank);
    }
    hosts_[0].slots -= static_cast<int>(ranks.size());
    if (hosts_[0].slots <= 0) hosts_.clear();
    return;
  }
  std::set<std::string> gone;  // resolved on the placement the job ran with
  for (const LostRank& l : lost) {
    gone.insert(l.rank >= 0 && l.rank < world ? HostOfRank(l.rank) : l.host);
  }
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    if (!gone.count(it->name)) {
      ++it;
      continue;
    }
    if (slurm_) excluded_.push_back(it->name);
    if (!discovery_script_.empty()) held_out_.insert(it->name);
    it = hosts_.erase(it);
  }
}

absl::StatusOr<std::vector<Host>> Cluster::Discover() {
  if (discovery_script_.empty()) return hosts_;
  ASSIGN_OR_RETURN(const std::string text, OutputOf(discovery_script_));
  ASSIGN_OR_RETURN(const std::vector<Host> listed,
                   ParseDiscoveredHosts(text, "the host-discovery script's output"));
  std::set<std::string> still_listed;
  std::vector<Host> available;
  for (const Host& host : listed) {
    if (held_out_.count(host.name)) {
      still_listed.insert(host.name);
    } else {
      available.push_back(host);
    }
  }
  held_out_ = std::move(still_listed);
  return available;
}

absl::Status Cluster::Rediscover() {
  ASSIGN_OR_RETURN(hosts_, Discover());
  return absl::OkStatus();
}

}  // namespace tetra
