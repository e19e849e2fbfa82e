#include "observe/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "proto/tensorboard_event.pb.h"

namespace tetra {
namespace {

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

double WallTime() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

}  // namespace

std::string TfRecord(const std::string& data) {
  std::string record;
  AppendLittleEndian(record, data.size(), 8);
  AppendLittleEndian(record, MaskCrc32c(Crc32c(record.data(), 8)), 4);
  record += data;
  AppendLittleEndian(record, MaskCrc32c(Crc32c(data.data(), data.size())), 4);
  return record;
}

absl::StatusOr<TensorBoardWriter> TensorBoardWriter::Open(const std::string& dir) {
  std::error_code ignored;  // fopen reports a directory that could not be made
  std::filesystem::create_directories(dir, ignored);
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(WallTime()), ".", HostName());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return UserError(
        absl::StrCat("cannot create ", path, " for log.tensorboard_dir: ", std::strerror(errno)),
        "point log.tensorboard_dir at a writable directory");
  }
  TensorBoardWriter writer;
  writer.path_ = path;
  writer.file_ = std::shared_ptr<FILE>(f, std::fclose);
  tensorboard::Event version;
  version.set_wall_time(WallTime());
  version.set_file_version("brain.Event:2");
  RETURN_IF_ERROR(writer.WriteRecord(version.SerializeAsString()));
  return writer;
}

absl::Status TensorBoardWriter::Write(const StepMetrics& m) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(m.step);
  std::vector<std::pair<const char*, double>> fields = StepFields(m);
  if (m.run) {  // the first step's line also carries the run's layout
    for (const auto& field : RunFields(*m.run)) fields.push_back(field);
  }
  for (const auto& [tag, value] : fields) {
    tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
    v->set_tag(std::string(tag));
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& data) {
  const std::string record = TfRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size() ||
      std::fflush(file_.get()) != 0) {
    return UserError(
        absl::StrCat("writing TensorBoard events to ", path_, " failed: ", std::strerror(errno)),
        "check the disk has space, or point log.tensorboard_dir elsewhere",
        absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

}  // namespace tetra
