// The `tetra` command line:
//   tetra train  --config FILE.textproto [--set path.to.field=value ...]
//   tetra export --config FILE.textproto --out DIR [--dtype f32|bf16] [--set ...]
//   tetra plan   --config FILE.textproto --world N [--json] ...
//   tetra launch --np N [--min-np M] [--hostfile F | --host-discovery-script S] ... -- train ...
//   tetra checkpoint inspect DIR | export DIR --out MODEL_DIR
//   mpirun -np N tetra commbench ...
// Exit code 0 only on success; errors are one sentence plus a hint on stderr.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/weights_io.h"
#include "comm/launcher.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "launch/rank_errors.h"
#include "model/language_model.h"
#include "plan/memory_check.h"
#include "tools/checkpoint_command.h"
#include "tools/command_line.h"
#include "tools/commbench_command.h"
#include "tools/launch_command.h"
#include "tools/plan_command.h"
#include "tools/report_command.h"
#include "train/config_loader.h"
#include "train/device_world.h"
#include "train/trainer.h"

namespace tetra {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  tetra train  --config FILE.textproto [--set path.to.field=value ...]\n"
    "  tetra export --config FILE.textproto --out DIR [--dtype f32|bf16] [--set ...]\n"
    "  tetra plan   --config FILE.textproto --world N [--json] [--gpus-per-node G] [--set ...]\n"
    "  tetra plan   --config FILE.textproto --cluster CLUSTER.textproto [--world N] [--json] "
    "[--set ...]\n"
    "  tetra launch --np N [--min-np M] [--hostfile F | --host-discovery-script S "
    "[--discovery-interval-s T]] [--max-restarts K] -- train --config FILE [--set ...]\n"
    "  tetra report --out DIR [--config F --cluster C] RUN.jsonl ...\n"
    "  tetra checkpoint inspect DIR | export DIR --out MODEL_DIR [--dtype f32|bf16]\n"
    "  mpirun -np N tetra commbench [--op all_reduce|...|all] [--group world|even_odd|pairs] ...\n";

void PrintError(const absl::Status& status) {
  std::cerr << "tetra: error: " << status.message() << "\n" << std::flush;
}

absl::StatusOr<TrainerConfig> ConfigFromFlags(const ParsedFlags& flags,
                                              const std::string& command) {
  auto config = flags.values.find("config");
  if (config == flags.values.end()) {
    return UserError(absl::StrCat("tetra ", command, " needs --config FILE.textproto"),
                     absl::StrCat("tetra ", command, " --config configs/tiny_dense.textproto"));
  }
  // A layout is checked against the job this process is actually part of.
  return LoadConfig(config->second, flags.sets, LaunchedWorldSize());
}

// The job as one rank runs it; `session` holds MPI when a launcher started several ranks.
absl::Status Training(int argc, char** argv, std::optional<MpiSession>& session) {
  ASSIGN_OR_RETURN(ParsedFlags flags, ParseFlags(argc, argv, 2, "train", {"config", "set"}));
  ASSIGN_OR_RETURN(TrainerConfig config, ConfigFromFlags(flags, "train"));
  // MPI only when a launcher started several ranks; one process needs none.
  std::unique_ptr<Communicator> world;
  if (LaunchedWorldSize() > 1) {
    session.emplace(&argc, &argv);
    world = MpiWorld(config.parallel().comm_timeout_s());
  } else {
    world = std::make_unique<SelfCommunicator>();
  }
  ASSIGN_OR_RETURN(world, MakeTrainingWorld(config, std::move(world), std::cout));
  ASSIGN_OR_RETURN(const ParallelState parallel,
                   ParallelState::Create(config.parallel(), std::move(world)));
  return Train(config, parallel, std::cout).status();
}

absl::Status TrainCommand(int argc, char** argv) {
  std::optional<MpiSession> session;
  const absl::Status status = Training(argc, argv, session);
  // An error is a reason tetra launch must not restart the job for.
  if (!status.ok()) RecordRankError(status);
  if (!status.ok() && session) {
    // Other ranks may be inside a collective: finalising MPI could wait for
    // them forever, so end this rank now; mpirun then ends the job.
    PrintError(status);
    _exit(1);
  }
  return status;
}

absl::Status ExportCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(ParsedFlags flags,
                   ParseFlags(argc, argv, 2, "export", {"config", "set", "out", "dtype"}));
  ASSIGN_OR_RETURN(TrainerConfig config, ConfigFromFlags(flags, "export"));
  if (!flags.values.count("out")) {
    return UserError("tetra export needs --out DIR", "tetra export --config F --out exported/");
  }
  ASSIGN_OR_RETURN(const DType dtype, ExportDTypeFlag(flags));
  RETURN_IF_ERROR(CheckRankMemory(config, PlanLayout{}, MemoryUse::kWeights,
                                  ReadMachineMemory(1, /*gpu=*/false)));
  LanguageModel model(config.model(), config.train().seed());
  if (!config.init_from().empty())
    RETURN_IF_ERROR(LoadWeights(config.init_from(), config.model(), model.parameters()));
  SelfCommunicator self;
  return ExportWeights(flags.values.at("out"), model.parameters(), config.model(),
                       config.train().seq_length(), dtype, self, /*write=*/true);
}

int Run(int argc, char** argv) {
  const std::string command = argc >= 2 ? argv[1] : "";
  absl::Status status;
  if (command == "train") {
    status = TrainCommand(argc, argv);
  } else if (command == "export") {
    status = ExportCommand(argc, argv);
  } else if (command == "launch") {
    status = LaunchCommand(argc, argv);
  } else if (command == "commbench") {
    status = CommbenchCommand(argc, argv);
  } else if (command == "checkpoint") {
    status = CheckpointCommand(argc, argv);
  } else if (command == "plan") {
    status = PlanCommand(argc, argv);
  } else if (command == "report") {
    status = ReportCommand(argc, argv);
  } else if (command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  } else {
    std::cerr << "tetra: unknown command \"" << command << "\"\n" << kUsage;
    return 2;
  }
  if (!status.ok()) {
    PrintError(status);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::Run(argc, argv); }
