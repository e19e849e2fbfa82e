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
#include "observe/metrics_log.h"

namespace tetra {
absl::StatusOr<MetricsLine> ParseMetricsLine(const std::string& line) {
  size_t at = 0;
  absl::StatusOr<JsonValue> json = ParseJson(line, &at);
  if (!json.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(json.status().message(), " at character ", at + 1));
  if (json->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an object, not ", JsonKindName(json->kind)));
  }
  MetricsLine fields;
  for (size_t i = 0; i < json->keys.size(); ++i) {
    const JsonValue& value = json->items[i];
    if (value.kind == JsonValue::Kind::kNumber) {
      fields[json->keys[i]] = value.number;
    } else if (value.kind == JsonValue::Kind::kNull) {  // a non-finite number
      fields[json->keys[i]] = std::numeric_limits<double>::quiet_NaN();
    } else if (value.kind != JsonValue::Kind::kString) {
      return absl::InvalidArgumentError(absl::StrCat("field \"", json->keys[i], "\" is ",
                                                     JsonKindName(value.kind), ", not a number"));
    }
  }
  return fields;
}

namespace {

// The first line's "schedule" (parallel.schedule's name, a string) and
// "virtual_stages"; runs from before they were written ran 1F1B (interleaved
// where virtual_stages says so) and default to it.
absl::Status ReadSchedule(const std::string& path, const std::string& first_text,
                          const MetricsLine& first, RunLayout* layout) {
  const absl::StatusOr<JsonValue> json =
      ParseJson(first_text);  // parsed once already: it is an object
  if (const JsonValue* schedule = json.ok() ? json->Find("schedule") : nullptr;
      schedule != nullptr) {
    if (schedule->kind != JsonValue::Kind::kString ||
        !ParallelConfig::Schedule_Parse(schedule->string, &layout->schedule)) {
      return UserError(
          absl::StrCat(path, ": the first line's schedule is ",
                       schedule->kind == JsonValue::Kind::kString ? UserText(schedule->string)
                                                                  : JsonKindName(schedule->kind),
                       ", not a parallel.schedule name"),
          "pass the metrics of a run written by tetra train");
    }
  }
  const double v = first.count("virtual_stages") ? first.at("virtual_stages") : 1;
  if (!(v >= 1 && v <= 1 << 20 && v == std::floor(v))) {
    return UserError(absl::StrCat(path, ": the first line's virtual_stages is ", v,
                                  ", not a size from 1 to 2^20"),
                     "pass the metrics of a run written by tetra train");
  }
  layout->virtual_stages = static_cast<int>(v);
  if (const absl::StatusOr<ScheduleSpec> spec = RunScheduleSpec(*layout); !spec.ok()) {
    const std::string what(spec.status().message());
    return UserError(absl::StrCat(path, ": the first line's schedule ",
                                  ParallelConfig::Schedule_Name(layout->schedule),
                                  " with virtual_stages ", layout->virtual_stages,
                                  " cannot be what ran: ", what.substr(0, what.find("\nhint: "))),
                     "pass the metrics of a run written by tetra train");
  }
  return absl::OkStatus();
}

// The metrics objects of `path`'s non-empty lines, and the first line's text.
absl::StatusOr<std::vector<MetricsLine>> ReadMetricsLines(const std::string& path,
                                                          std::string* first_text) {
  ASSIGN_OR_RETURN(
      const std::string content,
      ReadInputFile(path, "metrics file", "pass the log.metrics_path files of finished runs"));
  std::istringstream file(content);
  std::vector<MetricsLine> lines;
  std::string text;
  for (int number = 1; std::getline(file, text); ++number) {
    if (text.empty() || IsMetricsEvent(text)) continue;  // a restart, not a step
    if (lines.empty()) *first_text = text;
    absl::StatusOr<MetricsLine> line = ParseMetricsLine(text);
    if (!line.ok()) {
      return UserError(absl::StrCat(path, " line ", number,
                                    " is not a metrics object: ", line.status().message()),
                       "pass files written by tetra train's log.metrics_path");
    }
    lines.push_back(*std::move(line));
  }
  if (lines.empty())
    return UserError(absl::StrCat(path, " holds no steps"), "pass the metrics of a run that ran");
  return lines;
}

// The first line's layout sizes: positive whole numbers (ints, as the config
// has them) whose product is the world size.
absl::Status ReadMesh(const std::string& path, const MetricsLine& first, RunLayout* layout) {
  if (!first.count("world_size")) {
    return UserError(
        absl::StrCat(path, " has no run layout (world_size, tensor, ...) on its first line"),
        "rerun with this tetra version, which writes the layout with the first step");
  }
  for (const char* name : {"world_size", "tensor", "pipeline", "data", "expert",
                           "global_batch_size", "micro_batch_size", "seq_length"}) {
    const double value = first.count(name) ? first.at(name) : 0;
    if (!(value >= 1 && value <= std::numeric_limits<int>::max() && value == std::floor(value))) {
      return UserError(absl::StrCat(path, ": the first line's ", name, " is ", value,
                                    ", not a size from 1 to 2^31 - 1"),
                       "pass the metrics of a run written by tetra train");
    }
  }
  auto integer = [&](const char* name) {
    return first.count(name) ? static_cast<int>(first.at(name)) : 0;
  };
  const int tensor = integer("tensor"), pipeline = integer("pipeline"), data = integer("data");
  // Runs from before context parallelism wrote no "context": 1.
  const double context_value = first.count("context") ? first.at("context") : 1;
  const int context =
      context_value >= 1 && context_value <= 1 << 20 && context_value == std::floor(context_value)
          ? static_cast<int>(context_value)
          : 0;
  if (context == 0 || int64_t{tensor} * context * pipeline * data != integer("world_size") ||
      (int64_t{data} * context) % integer("expert") != 0) {
    return UserError(absl::StrCat(path, ": the first line's layout (world_size ",
                                  integer("world_size"), ", tensor ", tensor, ", context ",
                                  context_value, ", pipeline ", pipeline, ", data ", data,
                                  ", expert ", integer("expert"), ") is not one a run can have"),
                     "pass the metrics of a run written by tetra train");
  }
  layout->mesh = MeshShape::Of(tensor, pipeline, data, integer("expert"), context);
  layout->global_batch_size = integer("global_batch_size");
  layout->micro_batch_size = integer("micro_batch_size");
  layout->seq_length = integer("seq_length");
  layout->zero_stage = integer("zero_stage");
  return absl::OkStatus();
}

// The rank most often the slowest over the steps after the first, and the
// median ratio (multi-rank runs; a file written before these fields has neither).
absl::Status SummarizeStragglers(const std::vector<MetricsLine>& lines, RunSummary* run) {
  std::map<int, int> slowest_steps;
  std::vector<double> ratios;
  for (size_t i = lines.size() > 1 ? 1 : 0; i < lines.size(); ++i) {
    if (!lines[i].count("slowest_rank") || !lines[i].count("straggler_ratio")) {
      return absl::OkStatus();
    }
    const double rank = lines[i].at("slowest_rank"), ratio = lines[i].at("straggler_ratio");
    // The slowest rank's time over the median is at least 1.
    if (!(rank >= 0 && rank < run->layout.mesh.world && rank == std::floor(rank)) ||
        !(ratio >= 1 && std::isfinite(ratio))) {
      return UserError(absl::StrCat(run->path, ": line ", i + 1, "'s slowest_rank ", rank,
                                    " and straggler_ratio ", ratio, " are not a rank of its ",
                                    run->layout.mesh.world, " ranks and a ratio >= 1"),
                       "pass the metrics of a run written by tetra train");
    }
    ++slowest_steps[static_cast<int>(rank)];
    ratios.push_back(ratio);
  }
  for (const auto& [rank, steps] : slowest_steps) {
    if (steps > run->slowest_rank_steps) {
      run->slowest_rank = rank;
      run->slowest_rank_steps = steps;
    }
  }
  run->compared_steps = static_cast<int>(ratios.size());
  run->straggler_ratio = Median(ratios);
  return absl::OkStatus();
}

// The statistics over the steps after the first (the first alone when it is the only one).
void Summarize(const std::vector<MetricsLine>& lines, RunSummary* run) {
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
  run->steps = static_cast<int>(lines.size());
  run->step_time_s = median("step_time_s");
  run->tokens_per_s = median("tokens_per_s");
  run->best_step_time_s = lines[begin].at("step_time_s");
  for (size_t i = begin; i < lines.size(); ++i) {
    run->best_step_time_s = std::min(run->best_step_time_s, lines[i].at("step_time_s"));
  }
  run->fwd_s = median("fwd_s");
  run->bwd_s = median("bwd_s");
  run->optimizer_s = median("optimizer_s");
  run->comm_tp_s = median("comm_exposed_s_tp");
  run->comm_dp_s = median("comm_exposed_s_dp");
  run->comm_pp_s = median("comm_exposed_s_pp");
  run->comm_ep_s = median("comm_exposed_s_ep");
  run->bubble_fraction = optional_median("bubble_fraction");
  run->mfu = optional_median("mfu");
  run->last_loss = lines.back().at("loss");
}

}  // namespace

absl::StatusOr<ScheduleSpec> RunScheduleSpec(const RunLayout& layout) {
  // The config's mapping (ScheduleSpecFromConfig) from what the run wrote. It
  // also checks the model's layers split into the chunks, which a run that
  // ran did: any multiple of the chunks stands in for them.
  TrainerConfig config;
  ParallelConfig& parallel = *config.mutable_parallel();
  parallel.set_pipeline(layout.mesh.pp);
  parallel.set_virtual_stages(layout.virtual_stages);
  parallel.set_schedule(layout.schedule);
  config.mutable_train()->set_global_batch_size(layout.global_batch_size);
  config.mutable_train()->set_micro_batch_size(layout.micro_batch_size);
  config.mutable_model()->set_num_hidden_layers(layout.mesh.pp * layout.virtual_stages);
  return ScheduleSpecFromConfig(config, layout.mesh.dp);
}

absl::StatusOr<RunSummary> ReadRun(const std::string& path) {
  std::string first_text;
  ASSIGN_OR_RETURN(const std::vector<MetricsLine> lines, ReadMetricsLines(path, &first_text));
  RunSummary run;
  run.path = path;
  RETURN_IF_ERROR(ReadMesh(path, lines.front(), &run.layout));
  RETURN_IF_ERROR(ReadSchedule(path, first_text, lines.front(), &run.layout));
  Summarize(lines, &run);
  RETURN_IF_ERROR(SummarizeStragglers(lines, &run));
  return run;
}

}  // namespace tetra
