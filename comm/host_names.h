// Every rank's host name, for messages that name a rank's machine (the
// straggler warning, train/run_reporter.h): gathered once at start, so a
// message later costs no communication.
#ifndef TETRA_COMM_HOST_NAMES_H_
#define TETRA_COMM_HOST_NAMES_H_

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tetra {

// Each rank's machine name (gethostname; "unknown" where it has none), by
// rank: one all-gather of 64 bytes per rank (Linux's HOST_NAME_MAX; longer
// names are cut). Collective over `world`.
std::vector<std::string> HostNames(Communicator& world);

}  // namespace tetra

#endif  // TETRA_COMM_HOST_NAMES_H_
