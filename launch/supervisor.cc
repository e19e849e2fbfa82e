#include "launch/supervisor.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_directory.h"
#include "checkpoint/local_checkpoint.h"
#include "core/json.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "launch/child_process.h"
#include "launch/cluster.h"
#include "launch/elastic_plan.h"
#include "launch/host_list.h"
#include "launch/lost_ranks.h"
#include "launch/rank_errors.h"
#include "observe/metrics_log.h"

namespace tetra {
namespace {

std::vector<std::string> LaunchCommand(const LaunchOptions& options, const Cluster& cluster,
                                       const ElasticPlan& plan) {
  std::vector<std::string> argv;
  if (cluster.slurm()) {
    const int per_node = cluster.hosts().front().slots;
    argv = {"srun", absl::StrCat("--nodes=", (plan.world + per_node - 1) / per_node),
            absl::StrCat("--ntasks=", plan.world), absl::StrCat("--ntasks-per-node=", per_node),
            "--kill-on-bad-exit=1"};
    if (!cluster.excluded().empty()) {
      argv.push_back(absl::StrCat("--exclude=", absl::StrJoin(cluster.excluded(), ",")));
    }
  } else {
    argv = {"mpirun",
            "-np",
            absl::StrCat(plan.world),
            "--host",
            MpirunHostArgument(cluster.hosts(), plan.world),
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
  int64_t last = 0;
  std::ifstream file(metrics_path);
  for (std::string line; std::getline(file, line);) {
    last = std::max(last, StepOfMetricsLine(line).value_or(0));
  }
  return last;
}

std::string DescribePlan(const ElasticPlan& plan) {
  const ParallelConfig& p = plan.config.parallel();
  return absl::StrCat(plan.world, " ranks (tensor ", p.tensor(), " x context ", p.context(),
                      " x pipeline ", p.pipeline(), " x data ", plan.data, ")");
}

// The restart's line on the log and, with log.metrics_path, in the metrics.
absl::Status ReportRestart(int restart, const std::string& cause, const ElasticPlan& plan,
                           std::ostream& log) {
  std::ostringstream notes;
  ASSIGN_OR_RETURN(const std::optional<CheckpointEntry> newest,
                   NewestCompleteCheckpoint(plan.config.checkpoint().dir(), notes));
  int64_t resumed = newest ? newest->step : 0;
  // The copy in memory on this host, when newer, is what the job will take
  // (the job's own line says so where the copies on other hosts decide).
  if (!plan.config.checkpoint().local_dir().empty()) {
    resumed = std::max(resumed, NewestLocalStep(plan.config.checkpoint(), HostName()).value_or(0));
  }
  const std::string& metrics = plan.config.log().metrics_path();
  const int64_t lost_steps =
      metrics.empty() ? 0 : std::max<int64_t>(0, LastLoggedStep(metrics) - resumed);
  log << notes.str() << "tetra launch: restart " << restart << ": " << cause << "; going on with "
      << DescribePlan(plan) << " from step " << resumed
      << (metrics.empty() ? "" : absl::StrCat(", ", lost_steps, " steps to redo")) << "\n"
      << std::flush;
  if (metrics.empty()) return absl::OkStatus();
  std::string line(kMetricsEventPrefix);
  absl::StrAppend(&line, "\"restart\", \"restart\": ", restart, ", \"cause\": ");
  AppendJsonString(cause, &line);
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
  if (options.host_discovery_script.empty() && TotalSlots(cluster.hosts()) < options.np) {
    return UserError(absl::StrCat("the hosts have ", TotalSlots(cluster.hosts()),
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
  if (cluster.hosts().size() < 2) return lost;
  log << "tetra launch: the failure named no lost rank or host; probing the "
      << cluster.hosts().size() << " hosts\n"
      << std::flush;
  for (const Host& host : cluster.hosts()) {
    std::vector<std::string> argv = {"timeout", "-k", "5", absl::StrCat(timeout_s)};
    if (cluster.slurm()) {
      argv.insert(argv.end(), {"srun", "--nodes=1", "--ntasks=1", "--nodelist=" + host.name});
    } else {
      argv.insert(argv.end(), {"mpirun", "-np", "1", "--host", host.name + ":1"});
    }
    argv.push_back("true");
    ASSIGN_OR_RETURN(const ChildExit exit, RunWatched(argv, {}, {.grace_s = timeout_s}));
    if (!exit.ok()) {
      lost.push_back({.host = host.name,
                      .how = absl::StrCat("it started no process within ", timeout_s, " s")});
    }
  }
  return lost;
}

// How one run of the launcher ended, when it is not a reason to stop.
struct Outcome {
  bool finished = false;               // the run's last step is saved
  std::vector<LostRank> lost;          // the job failed: what was lost
  std::vector<std::string> came_back;  // it stopped to grow onto these hosts
};

// Whether the hosts the discovery script lists now would take a larger job
// than `plan`'s; the new hosts' names are left in `came_back`.
bool HostsCameBack(const LaunchOptions& options, Cluster& cluster, const ElasticPlan& plan,
                   std::vector<std::string>& came_back) {
  const absl::StatusOr<std::vector<Host>> now = cluster.Discover();
  if (!now.ok()) return false;  // tried again at the next check
  const absl::StatusOr<ElasticPlan> larger =
      PlanElastic(options.config_path, options.overrides, std::min(options.np, TotalSlots(*now)),
                  options.min_np);
  if (!larger.ok() || larger->world <= plan.world) return false;
  came_back.clear();
  for (const Host& host : *now) {
    const auto& old = cluster.hosts();
    const bool known = std::any_of(old.begin(), old.end(), [&](const Host& h) {
      return h.name == host.name && h.slots >= host.slots;
    });
    if (!known) came_back.push_back(host.name);
  }
  return true;
}

// The run's last step is saved: the job finished (a stop saves an earlier one).
absl::StatusOr<bool> RunFinished(const ElasticPlan& plan) {
  std::ostringstream notes;
  ASSIGN_OR_RETURN(const std::optional<CheckpointEntry> newest,
                   NewestCompleteCheckpoint(plan.config.checkpoint().dir(), notes));
  return newest && newest->step >= plan.config.train().steps();
}

// Makes checkpoint.dir/launch/attempt-N afresh: where the attempt's ranks record errors.
absl::StatusOr<std::string> AttemptDir(const ElasticPlan& plan, int attempt) {
  const std::string dir = absl::StrCat(plan.config.checkpoint().dir(), "/launch/attempt-", attempt);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!std::filesystem::create_directories(dir, error)) {
    return UserError(absl::StrCat("cannot create ", dir, ": ", error.message()),
                     "tetra launch keeps its state under checkpoint.dir: make it writable");
  }
  return dir;
}

// One run of the launcher: how it ended, or the reason not to go on.
absl::StatusOr<Outcome> RunOnce(const LaunchOptions& options, Cluster& cluster,
                                const ElasticPlan& plan, int attempt, std::ostream& log) {
  Outcome outcome;
  // Hosts may have come back while the job was down: no smaller job then.
  if (!options.host_discovery_script.empty() &&
      HostsCameBack(options, cluster, plan, outcome.came_back)) {
    return outcome;
  }
  ASSIGN_OR_RETURN(const std::string dir, AttemptDir(plan, attempt));
  log << "tetra launch: starting " << DescribePlan(plan) << " with "
      << (cluster.slurm() ? "srun" : "mpirun") << "\n"
      << std::flush;
  LostRankParser parser;
  // After a failure the launcher has the job's own patience to end it.
  WatchRules rules{.failed_line = [&](std::string_view line) { return parser.Line(line); },
                   .grace_s = plan.config.parallel().comm_timeout_s(),
                   .check_interval_s = options.discovery_interval_s};
  if (!options.host_discovery_script.empty()) {
    rules.stop_to_grow = [&] { return HostsCameBack(options, cluster, plan, outcome.came_back); };
  }
  ASSIGN_OR_RETURN(const ChildExit exit,
                   RunWatched(LaunchCommand(options, cluster, plan),
                              {absl::StrCat(kLaunchDirVariable, "=", dir)}, rules));
  if (exit.stopped) {
    return UserError("tetra launch was stopped by a signal before the run finished",
                     "run the same command again: it resumes from the newest checkpoint");
  }
  // Stopped to grow, the ranks may have been signalled before they could save.
  if (exit.ok() || exit.to_grow) {
    ASSIGN_OR_RETURN(outcome.finished, RunFinished(plan));
    if (outcome.finished || exit.to_grow) return outcome;
    return UserError(
        "the job stopped before its last step without an error (were its ranks sent SIGTERM or "
        "SIGINT?): tetra launch restarts a job that failed, not one that was stopped",
        "run the same command again: it resumes from the newest checkpoint");
  }
  if (const std::vector<std::string> errors = ReadRankErrors(dir); !errors.empty()) {
    return UserError(
        absl::StrCat("the job failed for a reason a restart cannot fix; ", errors.front()),
        "fix what it names and run the same command: it resumes from the newest checkpoint");
  }
  outcome.lost = parser.lost();
  if (outcome.lost.empty()) {
    ASSIGN_OR_RETURN(outcome.lost,
                     UnreachableHosts(cluster, plan.config.parallel().comm_timeout_s(), log));
  }
  // Nothing lost that a probe can see: a transient failure, restarted as it was.
  if (outcome.lost.empty()) {
    outcome.lost.push_back({.host = "none",
                            .how = absl::StrCat("the launcher exited with status ", exit.exit_code,
                                                ", signal ", exit.signal)});
  }
  return outcome;
}

}  // namespace

absl::Status Supervise(const LaunchOptions& options, std::ostream& log) {
  ASSIGN_OR_RETURN(Cluster cluster,
                   Cluster::Create({.np = options.np,
                                    .hostfile = options.hostfile,
                                    .discovery_script = options.host_discovery_script}));
  // A fixed host list must hold --np ranks; discovered hosts start at what is there.
  const bool discovered = !options.host_discovery_script.empty();
  const int first = discovered ? std::min(options.np, TotalSlots(cluster.hosts())) : options.np;
  ASSIGN_OR_RETURN(ElasticPlan plan, PlanElastic(options.config_path, options.overrides, first,
                                                 discovered ? options.min_np : options.np));
  RETURN_IF_ERROR(CheckRecipe(options, cluster, plan));
  for (int attempt = 0, failures = 0;; ++attempt) {
    // What the discovery script may read: the restarts so far.
    setenv("TETRA_LAUNCH_RESTARTS", absl::StrCat(attempt).c_str(), 1);
    ASSIGN_OR_RETURN(const Outcome outcome, RunOnce(options, cluster, plan, attempt, log));
    if (outcome.finished) {
      log << "tetra launch: the run finished (" << attempt << " restarts)\n" << std::flush;
      return absl::OkStatus();
    }
    std::string cause = absl::StrCat("hosts came back: ", absl::StrJoin(outcome.came_back, ", "));
    if (!outcome.lost.empty()) {
      cause = absl::StrCat("lost ", DescribeLost(outcome.lost));
      if (failures++ == options.max_restarts) {
        return UserError(absl::StrCat("the job failed again (", cause, ") and --max-restarts ",
                                      options.max_restarts, " is spent"),
                         "fix what keeps failing, or raise --max-restarts; the same command "
                         "resumes");
      }
      cluster.DropLost(outcome.lost, plan.world);
    }
    RETURN_IF_ERROR(cluster.Rediscover());
    ASSIGN_OR_RETURN(
        plan, PlanElastic(options.config_path, options.overrides,
                          std::min(options.np, TotalSlots(cluster.hosts())), options.min_np));
    RETURN_IF_ERROR(ReportRestart(attempt + 1, cause, plan, log));
  }
}

}  // namespace tetra
