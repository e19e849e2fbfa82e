// `tetra report --out DIR [--config F --cluster C [--set ...]] RUN.jsonl ...`:
// from the metrics files of several runs (world sizes, layouts), writes
// DIR/report.md and DIR/report.html (self-contained: inline SVG charts, no
// scripts, no network): throughput and scaling efficiency against the
// smallest run (strong when the global batch stays, weak when it grows with
// the ranks), the time breakdown per run as stacked bars, measured against
// the planner's predicted step time (with --config and --cluster:
// plan/layout_planner.h for each run's layout), and the measured pipeline
// bubble against the schedule's (p - 1) / (m + p - 1).
#ifndef TETRA_TOOLS_REPORT_COMMAND_H_
#define TETRA_TOOLS_REPORT_COMMAND_H_

#include "absl/status/status.h"

namespace tetra {

absl::Status ReportCommand(int argc, char** argv);

}  // namespace tetra

#endif  // TETRA_TOOLS_REPORT_COMMAND_H_
