// Checking, before the first step, that every place a run writes to can be
// written: export_path, log.metrics_path, log.tensorboard_dir, log.trace_path,
// checkpoint.dir and checkpoint.local_dir. Most of them are first written late
// (the export after the last step, the trace after its steps, the checkpoint
// at its interval), so a typo or an unwritable mount would otherwise cost
// the whole run. Each check creates the directory and writes and removes a probe file (a file
// path that exists is opened for appending and left as it is), on the ranks
// that write there.
#ifndef TETRA_TRAIN_OUTPUT_PATHS_H_
#define TETRA_TRAIN_OUTPUT_PATHS_H_

#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "proto/config.pb.h"

namespace tetra {

// `dir` (the value of config field `field`) is a directory this process can
// create files in: created when missing, a probe file created and removed.
absl::Status CheckWritableDirectory(const std::string& field, const std::string& dir);
// The file `path` (of config field `field`) can be written: its directory is
// created, and the file opened for appending when it exists (left as it is),
// else created and removed.
absl::Status CheckWritableFile(const std::string& field, const std::string& path);

// Every output location of `config` that is set, each on the ranks that write
// it: world rank 0 for the export, metrics, TensorBoard events and trace;
// every rank for checkpoint.dir and checkpoint.local_dir (each writes its
// shards there). Collective over `world`: every rank returns an error when
// any location fails, and the failing rank's names the field and the path.
absl::Status CheckOutputsWritable(const TrainerConfig& config, Communicator& world);

}  // namespace tetra

#endif  // TETRA_TRAIN_OUTPUT_PATHS_H_
