// How the ranks of a job started by tetra launch tell it that they failed
// for a reason a restart cannot fix (a config error, bad data, a NaN loss):
// each writes its error to TETRA_LAUNCH_DIR/error-rank-R before it exits.
// A rank that vanished (killed, its host lost) or ended on a communication
// timeout writes nothing, and the supervisor restarts the job.
#ifndef TETRA_LAUNCH_RANK_ERRORS_H_
#define TETRA_LAUNCH_RANK_ERRORS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tetra {

inline constexpr char kLaunchDirVariable[] = "TETRA_LAUNCH_DIR";

// Writes `error` for this rank (comm/launcher.h's LaunchedRank) when the
// job was started by tetra launch; best effort (the error is printed too).
void RecordRankError(const absl::Status& error);

// The errors ranks recorded in `dir`, ordered by rank: "rank 3: <message>".
std::vector<std::string> ReadRankErrors(const std::string& dir);

}  // namespace tetra

#endif  // TETRA_LAUNCH_RANK_ERRORS_H_
