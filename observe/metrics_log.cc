#include "observe/metrics_log.h"

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// The shortest text that reads back as exactly `value`, so runs compare bit
// for bit; JSON has no NaN or Inf, so a diverged loss is written as null.
std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

std::vector<std::pair<const char*, double>> StepFields(const StepMetrics& m) {
  std::vector<std::pair<const char*, double>> fields = {{"loss", m.loss},
                                                        {"lr", m.lr},
                                                        {"grad_norm", m.grad_norm},
                                                        {"tokens_per_s", m.tokens_per_s},
                                                        {"tflops", m.tflops}};
  auto add = [&fields](const char* name, const std::optional<double>& value) {
    if (value) fields.emplace_back(name, *value);
  };
  add("mfu", m.mfu);
  add("loss_floor", m.loss_floor);
  add("val_loss", m.val_loss);
  add("param_bytes", m.param_bytes);
  add("grad_bytes", m.grad_bytes);
  add("optimizer_bytes", m.optimizer_bytes);
  add("peak_memory_bytes", m.peak_memory_bytes);
  add("device_mallocs", m.device_mallocs);
  add("device_launches", m.device_launches);
  add("host_waits", m.host_waits);
  add("device_allocations", m.device_allocations);
  fields.emplace_back("step_time_s", m.step_time_s);
  add("fwd_s", m.fwd_s);
  add("bwd_s", m.bwd_s);
  add("optimizer_s", m.optimizer_s);
  add("comm_exposed_s", m.comm_exposed_s);
  add("comm_exposed_s_tp", m.comm_exposed_s_tp);
  add("comm_exposed_s_dp", m.comm_exposed_s_dp);
  add("comm_exposed_s_ep", m.comm_exposed_s_ep);
  add("comm_exposed_s_pp", m.comm_exposed_s_pp);
  add("bubble_fraction", m.bubble_fraction);
  add("aux_loss", m.aux_loss);
  add("moe_load_imbalance", m.moe_load_imbalance);
  add("dropped_tokens", m.dropped_tokens);
  add("all_to_all_bytes", m.all_to_all_bytes);
  add("mtp_loss", m.mtp_loss);
  add("checkpoint_stall_s", m.checkpoint_stall_s);
  if (m.slowest_rank) fields.emplace_back("slowest_rank", *m.slowest_rank);
  add("straggler_ratio", m.straggler_ratio);
  return fields;
}

std::vector<std::pair<const char*, double>> RunFields(const RunLayout& r) {
  return {{"world_size", r.mesh.world},
          {"tensor", r.mesh.tp},
          {"context", r.mesh.cp},
          {"pipeline", r.mesh.pp},
          {"data", r.mesh.dp},
          {"expert", r.mesh.ep},
          {"global_batch_size", r.global_batch_size},
          {"micro_batch_size", r.micro_batch_size},
          {"seq_length", r.seq_length},
          {"zero_stage", r.zero_stage},
          {"virtual_stages", r.virtual_stages}};
}

std::string MetricsJson(const StepMetrics& m) {
  std::string json = absl::StrCat("{\"step\": ", m.step);
  for (const auto& [name, value] : StepFields(m))
    absl::StrAppend(&json, ", \"", name, "\": ", Number(value));
  if (m.run) {
    for (const auto& [name, value] : RunFields(*m.run)) {
      absl::StrAppend(&json, ", \"", name, "\": ", Number(value));
    }
    absl::StrAppend(&json, ", \"schedule\": \"", ParallelConfig::Schedule_Name(m.run->schedule),
                    "\"");
  }
  json += "}";
  return json;
}

std::string ProgressLine(const StepMetrics& m, int total_steps, double eta_s) {
  std::string line = absl::StrFormat("step %d/%d | loss %.4f", m.step, total_steps, m.loss);
  if (m.loss_floor) absl::StrAppendFormat(&line, " (floor %.4f)", *m.loss_floor);
  if (m.val_loss) absl::StrAppendFormat(&line, " | val loss %.4f", *m.val_loss);
  if (m.mtp_loss) absl::StrAppendFormat(&line, " | mtp loss %.4f", *m.mtp_loss);
  absl::StrAppendFormat(&line, " | lr %.2e | grad norm %.3f | %.0f tok/s | %.2f GFLOP/s", m.lr,
                        m.grad_norm, m.tokens_per_s, m.tflops * 1e3);
  if (m.mfu) absl::StrAppendFormat(&line, " | MFU %.1f%%", *m.mfu * 100);
  absl::StrAppend(&line, " | ETA ", Duration(eta_s));
  return line;
}

std::optional<int64_t> StepOfMetricsLine(const std::string& line) {
  int64_t step = 0;
  if (std::sscanf(line.c_str(), "{\"step\": %" SCNd64, &step) != 1) return std::nullopt;
  return step;
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, int64_t resumed_step) {
  std::error_code ignored;  // fopen reports a directory that could not be made
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  std::string kept;
  if (std::ifstream previous(path); resumed_step > 0 && previous) {
    for (std::string line; std::getline(previous, line);) {
      const std::optional<int64_t> step = StepOfMetricsLine(line);
      if ((step && *step <= resumed_step) || IsMetricsEvent(line)) {
        absl::StrAppend(&kept, line, "\n");
      }
    }
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f != nullptr && std::fputs(kept.c_str(), f) < 0) {
    std::fclose(f);
    f = nullptr;
  }
  if (f == nullptr) {
    return UserError(
        absl::StrCat("cannot open log.metrics_path ", path, ": ", std::strerror(errno)),
        "point log.metrics_path at a writable directory");
  }
  MetricsLog log;
  log.path_ = path;
  log.file_ = std::shared_ptr<FILE>(f, std::fclose);
  return log;
}

absl::Status MetricsLog::Append(const StepMetrics& m) {
  std::string line = MetricsJson(m) + "\n";
  if (std::fputs(line.c_str(), file_.get()) < 0 || std::fflush(file_.get()) != 0) {
    return UserError(absl::StrCat("writing metrics to ", path_, " failed: ", std::strerror(errno)),
                     "check the disk has space, or point log.metrics_path elsewhere",
                     absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

}  // namespace tetra
