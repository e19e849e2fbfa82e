#include "launch/supervisor.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_directory.h"
#include "core/input_file.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "launch/child_process.h"
#include "launch/elastic_plan.h"
#include "launch/host_list.h"
#include "launch/lost_ranks.h"
#include "launch/rank_errors.h"
#include "observe/metrics_log.h"

namespace tetra {
namespace {

// Where the job's ranks may run: the hosts left, in launch order.
struct Cluster {
  std::vector<Host> hosts;
  bool slurm = false;
  std::vector<std::string> excluded;  // Slurm nodes lost (srun --exclude)

  // The host rank `rank` runs on: both launchers fill hosts in order.
  std::string HostOfRank(int rank) const {
    for (const Host& host : hosts) {
      if (rank < host.slots) return host.name;
      rank -= host.slots;
    }
    return "";
  }
};

absl::StatusOr<Cluster> InitialCluster(const LaunchOptions& options) {
  Cluster cluster;
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (options.hostfile.empty() && nodelist != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<std::string> nodes, ExpandSlurmNodelist(nodelist));
    const char* per_node = std::getenv("SLURM_NTASKS_PER_NODE");  // "4" or "4(x2)"
    const int n = static_cast<int>(nodes.size());
    const int slots = per_node != nullptr && std::atoi(per_node) > 0 ? std::atoi(per_node)
                                                                     : (options.np + n - 1) / n;
    for (const std::string& node : nodes) cluster.hosts.push_back({node, slots});
    cluster.slurm = true;
  } else if (!options.hostfile.empty()) {
    ASSIGN_OR_RETURN(const std::string text,
                     ReadInputFile(options.hostfile, "hostfile",
                                   "pass --hostfile a file of lines \"HOST slots=N\""));
    ASSIGN_OR_RETURN(cluster.hosts, ParseHostfile(text, options.hostfile));
  } else {
    cluster.hosts = {{"localhost", options.np}};
  }
  return cluster;
}

// With one machine a lost rank takes its slot (a GPU gone) and the machine
// stays (the supervisor runs on it); with several, a lost rank takes its
// host (a node failure is the common cause and a part of a node rarely helps).
void DropLost(const std::vector<LostRank>& lost, int world, Cluster& cluster) {
  if (cluster.hosts.size() == 1) {
    std::set<int> ranks;  // a rank may be reported twice
    for (const LostRank& l : lost) {
      if (l.rank >= 0) ranks.insert(l.rank);
    }
    cluster.hosts[0].slots -= static_cast<int>(ranks.size());
    if (cluster.hosts[0].slots <= 0) cluster.hosts.clear();
    return;
  }
  std::set<std::string> gone;  // resolved on the placement the job ran with
  for (const LostRank& l : lost) {
    gone.insert(l.rank >= 0 && l.rank < world ? cluster.HostOfRank(l.rank) : l.host);
  }
  for (auto it = cluster.hosts.begin(); it != cluster.hosts.end();) {
    if (!gone.count(it->name)) {
      ++it;
      continue;
    }
    if (cluster.slurm) cluster.excluded.push_back(it->name);
    it = cluster.hosts.erase(it);
  }
}

std::vector<std::string> LaunchCommand(const LaunchOptions& options, const Cluster& cluster,
                                       const ElasticPlan& plan) {
  std::vector<std::string> argv;
  if (cluster.slurm) {
    const int per_node = cluster.hosts.front().slots;
    argv = {"srun", absl::StrCat("--nodes=", (plan.world + per_node - 1) / per_node),
            absl::StrCat("--ntasks=", plan.world), absl::StrCat("--ntasks-per-node=", per_node),
            "--kill-on-bad-exit=1"};
    if (!cluster.excluded.empty()) {
      argv.push_back(absl::StrCat("--exclude=", absl::StrJoin(cluster.excluded, ",")));
    }
  } else {
    argv = {"mpirun",
            "-np",
            absl::StrCat(plan.world),
            "--host",
            MpirunHostArgument(cluster.hosts, plan.world),
            "-x",
            kLaunchDirVariable};
  }
  argv.insert(argv.end(), {options.tetra_binary, "train", "--config", options.config_path});
  for (const std::string& assignment : options.overrides)
    argv.insert(argv.end(), {"--set", assignment});
  argv.insert(argv.end(), {"--set", plan.Override()});
  return argv;
}

// The last step the metrics file records (0: none, or no file).
int64_t LastLoggedStep(const std::string& metrics_path) {
  int64_t last = 0, step = 0;
  std::ifstream file(metrics_path);
  for (std::string line; std::getline(file, line);) {
    if (std::sscanf(line.c_str(), "{\"step\": %" SCNd64, &step) == 1) last = std::max(last, step);
  }
  return last;
}

std::string DescribePlan(const ElasticPlan& plan) {
  const ParallelConfig& p = plan.config.parallel();
  return absl::StrCat(plan.world, " ranks (tensor ", p.tensor(), " x context ", p.context(),
                      " x pipeline ", p.pipeline(), " x data ", plan.data, ")");
}

// The restart's line on the log and, with log.metrics_path, in the metrics.
absl::Status ReportRestart(int restart, const LaunchOptions& options, const std::string& lost,
                           const ElasticPlan& plan, std::ostream& log) {
  std::ostringstream notes;
  ASSIGN_OR_RETURN(const std::optional<CheckpointEntry> newest,
                   NewestCompleteCheckpoint(plan.config.checkpoint().dir(), notes));
  const int64_t resumed = newest ? newest->step : 0;
  const std::string& metrics = plan.config.log().metrics_path();
  const int64_t lost_steps =
      metrics.empty() ? 0 : std::max<int64_t>(0, LastLoggedStep(metrics) - resumed);
  log << notes.str() << "tetra launch: restart " << restart << " of at most "
      << options.max_restarts << ": lost " << lost << "; going on with " << DescribePlan(plan)
      << " from step " << resumed
      << (metrics.empty() ? "" : absl::StrCat(", ", lost_steps, " steps to redo")) << "\n"
      << std::flush;
  if (metrics.empty()) return absl::OkStatus();
  std::string line(kMetricsEventPrefix);
  absl::StrAppend(&line, "\"restart\", \"restart\": ", restart, ", \"lost\": ");
  AppendJsonString(lost, &line);
  absl::StrAppend(&line, ", \"world_size\": ", plan.world, ", \"data\": ", plan.data,
                  ", \"resumed_step\": ", resumed, ", \"steps_lost\": ", lost_steps, "}\n");
  std::ifstream written(metrics, std::ios::ate);
  bool mid_line = false;  // a rank killed mid-line left no newline
  if (written && written.tellg() > 0) {
    written.seekg(-1, std::ios::end);
    mid_line = written.get() != '\n';
  }
  std::ofstream(metrics, std::ios::app) << (mid_line ? "\n" : "") << line;
  return absl::OkStatus();
}

absl::Status CheckRecipe(const LaunchOptions& options, const Cluster& cluster,
                         const ElasticPlan& plan) {
  if (TotalSlots(cluster.hosts) < options.np) {
    return UserError(absl::StrCat("the hosts have ", TotalSlots(cluster.hosts),
                                  " slots, fewer than --np ", options.np),
                     "list more hosts or slots, or lower --np");
  }
  const CheckpointConfig& checkpoint = plan.config.checkpoint();
  if (checkpoint.dir().empty() || !checkpoint.resume()) {
    return UserError(
        "tetra launch restarts a job from its checkpoints, and the recipe saves none "
        "(checkpoint.dir unset) or does not resume (checkpoint.resume false)",
        "set checkpoint.dir, and checkpoint.interval to how many steps a restart may redo");
  }
  return absl::OkStatus();
}

// After a failure that named nothing lost, the hosts that no longer start a
// process within `timeout_s` (a host powered off or cut off cannot say so).
absl::StatusOr<std::vector<LostRank>> UnreachableHosts(const Cluster& cluster, double timeout_s,
                                                       std::ostream& log) {
  std::vector<LostRank> lost;
  if (cluster.hosts.size() < 2) return lost;
  log << "tetra launch: the failure named no lost rank or host; probing the "
      << cluster.hosts.size() << " hosts\n"
      << std::flush;
  for (const Host& host : cluster.hosts) {
    std::vector<std::string> argv = {"timeout", "-k", "5", absl::StrCat(timeout_s)};
    if (cluster.slurm) {
      argv.insert(argv.end(), {"srun", "--nodes=1", "--ntasks=1", "--nodelist=" + host.name});
    } else {
      argv.insert(argv.end(), {"mpirun", "-np", "1", "--host", host.name + ":1"});
    }
    argv.push_back("true");
    ASSIGN_OR_RETURN(const ChildExit exit,
                     RunWatched(
                         argv, {}, [](std::string_view) { return false; }, timeout_s));
    if (!exit.ok()) {
      lost.push_back({.host = host.name,
                      .how = absl::StrCat("it started no process within ", timeout_s, " s")});
    }
  }
  return lost;
}

// One run of the launcher; the lost ranks it named, or the reason not to go on.
absl::StatusOr<std::vector<LostRank>> RunOnce(const LaunchOptions& options, const Cluster& cluster,
                                              const ElasticPlan& plan, int attempt,
                                              std::ostream& log) {
  const std::string dir = absl::StrCat(plan.config.checkpoint().dir(), "/launch/attempt-", attempt);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!std::filesystem::create_directories(dir, error)) {
    return UserError(absl::StrCat("cannot create ", dir, ": ", error.message()),
                     "tetra launch keeps its state under checkpoint.dir: make it writable");
  }
  log << "tetra launch: starting " << DescribePlan(plan) << " with "
      << (cluster.slurm ? "srun" : "mpirun") << "\n"
      << std::flush;
  LostRankParser parser;
  // After a failure the launcher has the job's own patience to end it.
  ASSIGN_OR_RETURN(
      const ChildExit exit,
      RunWatched(
          LaunchCommand(options, cluster, plan), {absl::StrCat(kLaunchDirVariable, "=", dir)},
          [&](std::string_view line) { return parser.Line(line); },
          plan.config.parallel().comm_timeout_s()));
  if (exit.ok()) return std::vector<LostRank>{};
  if (exit.stopped) {
    return UserError("tetra launch was stopped by a signal before the run finished",
                     "run the same command again: it resumes from the newest checkpoint");
  }
  if (const std::vector<std::string> errors = ReadRankErrors(dir); !errors.empty()) {
    return UserError(
        absl::StrCat("the job failed for a reason a restart cannot fix; ", errors.front()),
        "fix what it names and run the same command: it resumes from the newest "
        "checkpoint");
  }
  if (!parser.lost().empty()) return parser.lost();
  ASSIGN_OR_RETURN(std::vector<LostRank> lost,
                   UnreachableHosts(cluster, plan.config.parallel().comm_timeout_s(), log));
  // Nothing lost that a probe can see: a transient failure, restarted as it was.
  if (lost.empty()) {
    lost.push_back({.host = "none",
                    .how = absl::StrCat("the launcher exited with status ", exit.exit_code,
                                        ", signal ", exit.signal)});
  }
  return lost;
}

}  // namespace

absl::Status Supervise(const LaunchOptions& options, std::ostream& log) {
  ASSIGN_OR_RETURN(Cluster cluster, InitialCluster(options));
  ASSIGN_OR_RETURN(ElasticPlan plan,
                   PlanElastic(options.config_path, options.overrides, options.np, options.np));
  RETURN_IF_ERROR(CheckRecipe(options, cluster, plan));
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(const std::vector<LostRank> lost,
                     RunOnce(options, cluster, plan, attempt, log));
    if (lost.empty()) {
      log << "tetra launch: the run finished (" << attempt << " restarts)\n" << std::flush;
      return absl::OkStatus();
    }
    const std::string described = DescribeLost(lost);
    if (attempt == options.max_restarts) {
      return UserError(absl::StrCat("the job failed again (lost ", described,
                                    ") and --max-restarts ", options.max_restarts, " is spent"),
                       "fix what keeps failing, or raise --max-restarts; the same command resumes");
    }
    DropLost(lost, plan.world, cluster);
    ASSIGN_OR_RETURN(plan,
                     PlanElastic(options.config_path, options.overrides,
                                 std::min(options.np, TotalSlots(cluster.hosts)), options.min_np));
    RETURN_IF_ERROR(ReportRestart(attempt + 1, options, described, plan, log));
  }
}

}  // namespace tetra
