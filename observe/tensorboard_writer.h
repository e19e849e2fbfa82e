// TensorBoard event files (log.tensorboard_dir): records of TFRecord framing
// (uint64 length, masked CRC-32C of the length, the data, masked CRC-32C of
// the data; little-endian) holding tensorflow.Event messages
// (proto/tensorboard_event.proto). The first record carries file_version
// "brain.Event:2"; each step then writes one Event with a scalar per metric.
#ifndef TETRA_OBSERVE_TENSORBOARD_WRITER_H_
#define TETRA_OBSERVE_TENSORBOARD_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "observe/metrics_log.h"

namespace tetra {

// `data` framed as one TFRecord.
std::string TfRecord(const std::string& data);

// Writes every number of the metrics line (StepFields, and on the run's
// first line RunFields) as a scalar tagged with its metrics field name.
class TensorBoardWriter {
 public:
  // Creates `dir` and dir/events.out.tfevents.<unix seconds>.<host>, and
  // writes the file_version record.
  static absl::StatusOr<TensorBoardWriter> Open(const std::string& dir);
  absl::Status Write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::shared_ptr<FILE> file_;
};

}  // namespace tetra

#endif  // TETRA_OBSERVE_TENSORBOARD_WRITER_H_
