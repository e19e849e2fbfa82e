#include "tools/launch_command.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "launch/supervisor.h"
#include "tools/command_line.h"

namespace tetra {
namespace {

constexpr char kExample[] =
    "tetra launch --np 4 --min-np 2 -- train --config configs/tiny_dense.textproto "
    "--set checkpoint.dir=ckpt --set checkpoint.interval=10";

// The value of --`name` (`fallback` when absent): a whole number of at least `least`.
absl::StatusOr<int> CountFlag(const ParsedFlags& flags, const std::string& name, int fallback,
                              int least) {
  auto it = flags.values.find(name);
  if (it == flags.values.end()) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < least) {
    return UserError(absl::StrCat("tetra launch: --", name, " ", UserText(it->second),
                                  " is not a whole number of at least ", least),
                     kExample);
  }
  return value;
}

}  // namespace

absl::Status LaunchCommand(int argc, char** argv) {
  const int dashes = static_cast<int>(std::find(argv + 2, argv + argc, std::string("--")) - argv);
  if (dashes + 1 >= argc || std::string(argv[dashes + 1]) != "train") {
    return UserError("tetra launch needs the job after \"--\": -- train --config FILE [--set ...]",
                     kExample);
  }
  ASSIGN_OR_RETURN(const ParsedFlags flags,
                   ParseFlags(dashes, argv, 2, "launch",
                              {"np", "min-np", "hostfile", "max-restarts", "host-discovery-script",
                               "discovery-interval-s"}));
  ASSIGN_OR_RETURN(const ParsedFlags train,
                   ParseFlags(argc, argv, dashes + 2, "train", {"config", "set"}));
  if (!flags.values.count("np") || !train.values.count("config")) {
    return UserError("tetra launch needs --np N and the job's --config FILE", kExample);
  }
  LaunchOptions options;
  ASSIGN_OR_RETURN(options.np, CountFlag(flags, "np", 0, 1));
  ASSIGN_OR_RETURN(options.min_np, CountFlag(flags, "min-np", options.np, 1));
  ASSIGN_OR_RETURN(options.max_restarts, CountFlag(flags, "max-restarts", 3, 0));
  if (options.min_np > options.np) {
    return UserError(
        absl::StrCat("tetra launch: --min-np ", options.min_np, " exceeds --np ", options.np),
        "--min-np is the fewest ranks worth going on with, at most --np");
  }
  options.hostfile = flags.values.count("hostfile") ? flags.values.at("hostfile") : "";
  if (flags.values.count("host-discovery-script")) {
    options.host_discovery_script = flags.values.at("host-discovery-script");
  }
  if (!options.hostfile.empty() && !options.host_discovery_script.empty()) {
    return UserError("tetra launch takes --hostfile or --host-discovery-script, not both",
                     "a discovery script lists the hosts available now; drop the hostfile");
  }
  if (auto it = flags.values.find("discovery-interval-s"); it != flags.values.end()) {
    if (!absl::SimpleAtod(it->second, &options.discovery_interval_s) ||
        !(options.discovery_interval_s > 0 && options.discovery_interval_s <= 86400)) {
      return UserError(absl::StrCat("tetra launch: --discovery-interval-s ", UserText(it->second),
                                    " is not a number of seconds in (0, 86400]"),
                       "check for hosts every 30 s: --discovery-interval-s 30");
    }
  }
  options.config_path = train.values.at("config");
  options.overrides = train.sets;
  std::error_code error;
  options.tetra_binary = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (error)
    return absl::InternalError(absl::StrCat("cannot find this program: ", error.message()));
  return Supervise(options, std::cout);
}

}  // namespace tetra
