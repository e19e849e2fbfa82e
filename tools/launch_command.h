// `tetra launch --np N [--min-np M] [--hostfile F | --host-discovery-script
// S [--discovery-interval-s T]] [--max-restarts K] -- train --config FILE
// [--set ...]`: runs the training job under the elastic supervisor
// (launch/supervisor.h), which restarts it on the ranks left when ranks or
// hosts are lost, and on more when discovered hosts come back.
#ifndef TETRA_TOOLS_LAUNCH_COMMAND_H_
#define TETRA_TOOLS_LAUNCH_COMMAND_H_

#include "absl/status/status.h"

namespace tetra {

// Runs `tetra launch` on argv[2..argc).
absl::Status LaunchCommand(int argc, char** argv);

}  // namespace tetra

#endif  // TETRA_TOOLS_LAUNCH_COMMAND_H_
