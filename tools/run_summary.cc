#include "tools/run_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
absl::StatusOr<MetricsLine> ParseMetricsLine(const std::string& line) {
  size_t at = 0;
  absl::StatusOr<JsonValue> json = ParseJson(line, &at);
  if (!json.ok()) return absl::InvalidArgumentError(absl::StrCat(json.status().message(), " at character ", at + 1));
  if (json->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat("expected an object, not ", JsonKindName(json->kind)));
  }
  MetricsLine fields;
  for (size_t i = 0; i < json->keys.size(); ++i) {
    const JsonValue& value = json->items[i];
    if (value.kind == JsonValue::Kind::kNumber) {
      fields[json->keys[i]] = value.number;
    } else if (value.kind == JsonValue::Kind::kNull) {  // a non-finite number
      fields[json->keys[i]] = std::numeric_limits<double>::quiet_NaN();
    } else if (value.kind != JsonValue::Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat("field \"", json->keys[i], "\" is ", JsonKindName(value.kind), ", not a number"));
    }
  }
  return fields;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

absl::StatusOr<RunSummary> ReadRun(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string content,
                   ReadInputFile(path, "metrics file",
                                 "pass the log.metrics_path files of finished runs"));
  std::istringstream file(content);
  std::vector<MetricsLine> lines;
  std::string text;
  for (int number = 1; std::getline(file, text); ++number) {
    if (text.empty()) continue;
    absl::StatusOr<MetricsLine> line = ParseMetricsLine(text);
    if (!line.ok()) {
      return UserError(absl::StrCat(path, " line ", number, " is not a metrics object: ", line.status().message()),
                       "pass files written by tetra train's log.metrics_path");
    }
    lines.push_back(*std::move(line));
  }
  if (lines.empty()) return UserError(absl::StrCat(path, " holds no steps"), "pass the metrics of a run that ran");
  const MetricsLine& first = lines.front();
  if (!first.count("world_size")) {
    return UserError(absl::StrCat(path, " has no run layout (world_size, tensor, ...) on its first line"),
                     "rerun with this tetra version, which writes the layout with the first step");
  }
  RunSummary run;
  run.path = path;
  run.steps = static_cast<int>(lines.size());
  auto integer = [&](const char* name) { return first.count(name) ? static_cast<int>(first.at(name)) : 0; };
  // The layout's sizes: positive whole numbers (ints, as the config has them)
  // whose product is the world size.
  for (const char* name : {"world_size", "tensor", "pipeline", "data", "expert", "global_batch_size",
                           "micro_batch_size", "seq_length"}) {
    const double value = first.count(name) ? first.at(name) : 0;
    if (!(value >= 1 && value <= std::numeric_limits<int>::max() && value == std::floor(value))) {
      return UserError(absl::StrCat(path, ": the first line's ", name, " is ", value,
                                    ", not a size from 1 to 2^31 - 1"),
                       "pass the metrics of a run written by tetra train");
    }
  }
  const int tensor = integer("tensor"), pipeline = integer("pipeline"), data = integer("data");
  // Runs from before context parallelism wrote no "context": 1.
  const double context_value = first.count("context") ? first.at("context") : 1;
  const int context = context_value >= 1 && context_value <= 1 << 20 && context_value == std::floor(context_value)
                          ? static_cast<int>(context_value)
                          : 0;
  if (context == 0 || int64_t{tensor} * context * pipeline * data != integer("world_size") ||
      (int64_t{data} * context) % integer("expert") != 0) {
    return UserError(absl::StrCat(path, ": the first line's layout (world_size ", integer("world_size"), ", tensor ",
                                  tensor, ", context ", context_value, ", pipeline ", pipeline, ", data ", data,
                                  ", expert ", integer("expert"), ") is not one a run can have"),
                     "pass the metrics of a run written by tetra train");
  }
  RunLayout& layout = run.layout;
  layout.mesh = MeshShape::Of(tensor, pipeline, data, integer("expert"), context);
  layout.global_batch_size = integer("global_batch_size");
  layout.micro_batch_size = integer("micro_batch_size");
  layout.seq_length = integer("seq_length");
  layout.zero_stage = integer("zero_stage");
  const size_t begin = lines.size() > 1 ? 1 : 0;
  auto median = [&](const char* name) {
    std::vector<double> values;
    for (size_t i = begin; i < lines.size(); ++i) {
      values.push_back(lines[i].count(name) ? lines[i].at(name) : 0.0);
    }
    return Median(values);
  };
  auto optional_median = [&](const char* name) -> std::optional<double> {
    if (!lines.back().count(name)) return std::nullopt;
    return median(name);
  };
  run.step_time_s = median("step_time_s");
  run.tokens_per_s = median("tokens_per_s");
  run.best_step_time_s = lines[begin].at("step_time_s");
  for (size_t i = begin; i < lines.size(); ++i) {
    run.best_step_time_s = std::min(run.best_step_time_s, lines[i].at("step_time_s"));
  }
  run.fwd_s = median("fwd_s");
  run.bwd_s = median("bwd_s");
  run.optimizer_s = median("optimizer_s");
  run.comm_tp_s = median("comm_exposed_s_tp");
  run.comm_dp_s = median("comm_exposed_s_dp");
  run.comm_pp_s = median("comm_exposed_s_pp");
  run.comm_ep_s = median("comm_exposed_s_ep");
  run.bubble_fraction = optional_median("bubble_fraction");
  run.mfu = optional_median("mfu");
  run.last_loss = lines.back().at("loss");
  return run;
}

}  // namespace tetra
