// `tetra commbench`: nccl-tests-style bandwidth of each comm operation, run
// under mpirun. For each message size it prints the time per operation,
// algorithm bandwidth (bytes / time) and bus bandwidth (algbw times nccl-tests'
// per-operation factor, comparable to link speed), and checks one run's
// result exactly (inputs are small integers) in a #wrong column.
//
//   mpirun -np N tetra commbench [--op all_reduce|reduce_scatter|all_gather|
//       all_to_all|broadcast|send_recv|all] [--group world|even_odd|pairs]
//       [--min-bytes 8] [--max-bytes 64M] [--factor 2] [--iters 20]
//       [--warmup 5] [--device cpu|cuda] [--timeout 60]
#ifndef TETRA_TOOLS_COMMBENCH_COMMAND_H_
#define TETRA_TOOLS_COMMBENCH_COMMAND_H_

#include "absl/status/status.h"

namespace tetra {

// Runs `tetra commbench` on argv[2..argc); rank 0 prints the table to stdout.
// Initialises MPI itself. Fails when a flag is bad or a result was wrong.
absl::Status CommbenchCommand(int argc, char** argv);

}  // namespace tetra

#endif  // TETRA_TOOLS_COMMBENCH_COMMAND_H_
