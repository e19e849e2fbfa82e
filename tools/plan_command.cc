#include "tools/plan_command.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/hf_config.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "model/language_model.h"
#include "parallel/mesh.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "plan/cluster_config.h"
#include "plan/layout_planner.h"
#include "tools/command_line.h"
#include "train/config_loader.h"
#include "train/config_validation.h"

namespace tetra {
namespace {

constexpr int kDefaultGpusPerNode = 8;
constexpr size_t kLineWidth = 100;  // where the group lists wrap
constexpr int kPlanRows = 15;       // layouts --cluster lists
// Plan lays out (and prints) every rank: a million take about a second and
// 1 GB, and exceed the largest clusters built by several times.
constexpr int kMaxWorld = 1 << 20;

struct PlanOptions {
  std::string config_path;
  std::vector<std::string> sets;
  int world = 0;
  int gpus_per_node = kDefaultGpusPerNode;
  bool json = false;
  std::string cluster_path;  // --cluster: predict and rank layouts
};

absl::StatusOr<int> PositiveFlag(const ParsedFlags& flags, const std::string& name) {
  int value;
  if (!absl::SimpleAtoi(flags.values.at(name), &value) || value < 1) {
    return UserError(absl::StrCat("tetra plan: --", name, " \"", flags.values.at(name),
                                  "\" is not a whole number of at least 1"),
                     "tetra plan --config F --world 16 --gpus-per-node 8");
  }
  return value;
}

absl::Status CheckWorld(int64_t world, const std::string& source) {
  if (world <= kMaxWorld) return absl::OkStatus();
  return UserError(absl::StrCat("tetra plan: ", source, " gives ", world, " ranks, more than the ",
                                kMaxWorld, " plan lays out"),
                   absl::StrCat("plan a world of at most ", kMaxWorld,
                                " ranks; a layout's groups repeat, so a "
                                "smaller world with the same sizes shows them"));
}

absl::StatusOr<PlanOptions> ParseOptions(int argc, char** argv) {
  // ParseFlags takes `--name value` pairs; the bare switch --json is picked
  // out first (--json=true|false goes through ParseFlags).
  PlanOptions options;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i >= 2 && std::string_view(argv[i]) == "--json") {
      options.json = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  ASSIGN_OR_RETURN(ParsedFlags flags,
                   ParseFlags(static_cast<int>(args.size()), args.data(), 2, "plan",
                              {"config", "set", "world", "gpus-per-node", "json", "cluster"}));
  if (flags.values.count("cluster")) options.cluster_path = flags.values.at("cluster");
  if (!flags.values.count("config") ||
      (!flags.values.count("world") && options.cluster_path.empty())) {
    return UserError("tetra plan needs --config FILE.textproto and --world N",
                     "tetra plan --config configs/tiny_dense.textproto --world 8");
  }
  options.config_path = flags.values.at("config");
  options.sets = flags.sets;
  if (flags.values.count("world")) {
    ASSIGN_OR_RETURN(options.world, PositiveFlag(flags, "world"));
    RETURN_IF_ERROR(CheckWorld(options.world, "--world"));
  }
  if (flags.values.count("gpus-per-node")) {
    ASSIGN_OR_RETURN(options.gpus_per_node, PositiveFlag(flags, "gpus-per-node"));
  }
  if (flags.values.count("json") && !absl::SimpleAtob(flags.values.at("json"), &options.json)) {
    return UserError(
        absl::StrCat("tetra plan: --json=", flags.values.at("json"), " is not true or false"),
        "write --json alone");
  }
  return options;
}

// The model a plan sizes: the class its export names and its parameters,
// counted over the tensors tetra builds for it.
struct PlannedModel {
  std::string architecture;
  int64_t parameters = 0;
};

PlannedModel PlannedModelOf(const ModelConfig& model) {
  PlannedModel planned{.architecture = HfArchitecture(model)};
  for (const ModelTensor& t : WholeModelTensors(model)) planned.parameters += NumElements(t.shape);
  return planned;
}

// {"model": {"architecture": "...", "parameters": N}, "layouts": [{"tp": 1,
// "cp": 1, ..., "step_s": 0.5, "memory_bytes": ..., "fits": true}, ...]}, best first.
std::string PredictionsJson(const PlannedModel& model, const std::vector<LayoutPrediction>& plans) {
  std::vector<std::string> rows;
  for (const LayoutPrediction& p : plans) {
    const PlanLayout& l = p.layout;
    const TimeEstimate& t = p.time;
    const MemoryEstimate& m = p.memory;
    rows.push_back(absl::StrFormat(
        R"j(  {"tp": %d, "cp": %d, "pp": %d, "dp": %d, "ep": %d, "zero_stage": %d, "recompute": "%s", )j"
        R"j("micro_batches": %d, "step_s": %.9g, "compute_s": %.9g, "tp_s": %.9g, "ep_s": %.9g, "cp_s": %.9g, )j"
        R"j("bubble_s": %.9g, "pp_s": %.9g, )j"
        R"j("dp_s": %.9g, "optimizer_s": %.9g, "overhead_s": %.9g, "bubble_fraction": %.9g, "mfu": %.9g, )j"
        R"j("weights_bytes": %.9g, "grads_bytes": %.9g, "optimizer_bytes": %.9g, "activations_bytes": %.9g, )j"
        R"j("memory_bytes": %.9g, "fits": %s, "stage_layers": [%s]})j",
        l.mesh.tp, l.mesh.cp, l.mesh.pp, l.mesh.dp, l.mesh.ep, l.zero_stage,
        Recompute::Value_Name(l.recompute), p.micro_batches, t.step_s(), t.compute_s, t.tp_s,
        t.ep_s, t.cp_s, t.bubble_s, t.pp_s, t.dp_s, t.optimizer_s, t.overhead_s, p.bubble_fraction,
        p.mfu, m.weights, m.grads, m.optimizer, m.activations, m.total(), p.fits ? "true" : "false",
        absl::StrJoin(p.stage_layers, ", ")));
  }
  return absl::StrCat("{\"model\": {\"architecture\": \"", model.architecture,
                      "\", \"parameters\": ", model.parameters, "},\n\"layouts\": [\n",
                      absl::StrJoin(rows, ",\n"), "\n]}\n");
}

std::string GroupText(const std::vector<int>& group) {
  return absl::StrCat("[", absl::StrJoin(group, ", "), "]");
}

// {"world": N, "ranks": [{"rank": 0, "tp": 0, ...}, ...], "groups": {"tp": [[0, 1], ...], ...}}
std::string PlanJson(const Mesh& mesh) {
  std::string out = absl::StrCat("{\"world\": ", mesh.shape().world, ", \"ranks\": [");
  for (int rank = 0; rank < mesh.shape().world; ++rank) {
    const RankCoords c = mesh.Coords(rank);
    absl::StrAppend(&out, rank > 0 ? ", " : "", "{\"rank\": ", rank, ", \"tp\": ", c.tp,
                    ", \"cp\": ", c.cp, ", \"ep\": ", c.ep, ", \"dp\": ", c.dp,
                    ", \"edp\": ", c.edp, ", \"pp\": ", c.pp, "}");
  }
  absl::StrAppend(&out, "], \"groups\": {");
  for (GroupKind kind : kGroupKinds) {
    std::vector<std::string> groups;
    for (const std::vector<int>& group : mesh.Groups(kind)) groups.push_back(GroupText(group));
    absl::StrAppend(&out, kind == kGroupKinds.front() ? "" : ", ", "\"", GroupKindName(kind),
                    "\": [", absl::StrJoin(groups, ", "), "]");
  }
  absl::StrAppend(&out, "}}\n");
  return out;
}

std::string PlanText(const Mesh& mesh, int gpus_per_node) {
  const MeshShape& s = mesh.shape();
  const int nodes = (s.world + gpus_per_node - 1) / gpus_per_node;
  std::string out =
      absl::StrCat(s.world, " ranks = tensor ", s.tp, " x context ", s.cp, " x pipeline ", s.pp,
                   " x data ", s.dp, ", order ", mesh.order(), "\nexpert weights: tensor ", s.tp,
                   " x expert ", s.ep, " x expert-data ", s.edp, " x pipeline ", s.pp, "\n", nodes,
                   nodes == 1 ? " node" : " nodes", " of ", gpus_per_node, " GPUs\n\n");

  // The table: one row per rank, columns as wide as their widest entry.
  const std::vector<std::string> header = {"rank", "node", "gpu", "tp", "cp",
                                           "ep",   "dp",   "edp", "pp"};
  std::vector<std::vector<int>> rows;
  for (int rank = 0; rank < s.world; ++rank) {
    const RankCoords c = mesh.Coords(rank);
    rows.push_back(
        {rank, rank / gpus_per_node, rank % gpus_per_node, c.tp, c.cp, c.ep, c.dp, c.edp, c.pp});
  }
  std::vector<size_t> width(header.size());
  for (size_t col = 0; col < header.size(); ++col) {
    width[col] = std::max(header[col].size(), absl::StrCat(rows.back()[col]).size());
    for (const std::vector<int>& row : rows)
      width[col] = std::max(width[col], absl::StrCat(row[col]).size());
  }
  auto pad = [](const std::string& text, size_t w) {
    return std::string(w - text.size() + 2, ' ') + text;
  };
  for (size_t col = 0; col < header.size(); ++col)
    absl::StrAppend(&out, pad(header[col], width[col]));
  absl::StrAppend(&out, "\n");
  for (const std::vector<int>& row : rows) {
    for (size_t col = 0; col < row.size(); ++col)
      absl::StrAppend(&out, pad(absl::StrCat(row[col]), width[col]));
    absl::StrAppend(&out, "\n");
  }

  // The groups, wrapped at kLineWidth.
  absl::StrAppend(&out, "\n");
  for (GroupKind kind : kGroupKinds) {
    const std::vector<std::vector<int>>& groups = mesh.Groups(kind);
    const std::string title = absl::StrCat(GroupKindName(kind), " groups (", groups.size(), "):");
    absl::StrAppend(&out, title);
    size_t column = title.size();
    for (const std::vector<int>& group : groups) {
      const std::string text = GroupText(group);
      if (column + 1 + text.size() > kLineWidth) {
        absl::StrAppend(&out, "\n ");
        column = 1;
      }
      absl::StrAppend(&out, " ", text);
      column += 1 + text.size();
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

// "F3" / "B3" / "W3" (weight gradient) for micro-batch 3; with several
// chunks per rank a letter names the chunk: "F3a", "B3b", "W3b".
std::string CellLabel(const Action& action, int virtual_stages) {
  const char* letter = action.type == ActionType::kForward  ? "F"
                       : action.type == ActionType::kWeight ? "W"
                                                            : "B";
  std::string label = absl::StrCat(letter, action.micro_batch);
  if (virtual_stages > 1) label += static_cast<char>('a' + action.chunk);
  return label;
}

// The configured pipeline schedule, checked (pipeline/schedule_checker.h), as
// a summary line and one timeline row per pipeline rank. Every time unit is a
// fixed number of columns, so a cell sits at its simulated start and idle
// time is blank; a backward's extra units are drawn as '-'. Where the kind
// splits backwards, B is the input gradient and W the weight gradient.
absl::StatusOr<std::string> ScheduleText(const TrainerConfig& config, const MeshShape& shape) {
  ASSIGN_OR_RETURN(ScheduleSpec spec, ScheduleSpecFromConfig(config, shape.dp));
  // Model chunks are cut from the layers as the run cuts them (one stage per
  // rank is drawn for any model, the schedule's shape alone).
  if (spec.virtual_stages > 1) RETURN_IF_ERROR(PartitionStages(config).status());
  ASSIGN_OR_RETURN(std::vector<std::vector<Action>> tables, BuildAllSchedules(spec));
  ASSIGN_OR_RETURN(ScheduleReport report, CheckSchedule(spec, tables));
  const int v = spec.virtual_stages;
  std::vector<int> peaks;
  for (const RankReport& rank : report.ranks) peaks.push_back(rank.peak_activations);
  std::string out = absl::StrFormat(
      "pipeline schedule %s, %d stages%s, %d micro-batches: bubble %.1f%% simulated, %s = %.1f%%; "
      "peak "
      "activations per rank %s%s\n",
      ScheduleKindName(spec.kind), spec.stages, v > 1 ? absl::StrCat(" x ", v, " chunks") : "",
      spec.micro_batches, 100 * report.BubbleFraction(), IdealBubbleFormula(spec),
      100 * IdealBubbleFraction(spec), absl::StrJoin(peaks, " "),
      v > 1 ? absl::StrCat(" (micro-batch chunks, 1/", v, " of a stage each)") : "");
  absl::StrAppend(&out, "time units: F ", ComputeTime(spec.kind, ActionType::kForward), ", B ",
                  ComputeTime(spec.kind, ActionType::kBackward),
                  SplitsBackward(spec.kind)
                      ? absl::StrCat(", W ", ComputeTime(spec.kind, ActionType::kWeight))
                      : "",
                  v > 1 ? " per chunk" : "", "; blank = idle\n");
  const size_t unit = CellLabel({ActionType::kForward, spec.micro_batches - 1, 0}, v).size() + 1;
  const size_t rank_width = absl::StrCat(spec.stages - 1).size();
  for (int rank = 0; rank < spec.stages; ++rank) {
    std::string row(report.step_time * unit, ' ');
    for (const TimedAction& cell : report.ranks[rank].timeline) {
      std::string text = CellLabel(cell.action, v);
      text.resize((cell.end - cell.start) * unit - 1,
                  cell.action.type == ActionType::kBackward ? '-' : ' ');
      row.replace(cell.start * unit, text.size(), text);
    }
    row.erase(row.find_last_not_of(' ') + 1);
    const std::string label = absl::StrCat(rank);
    absl::StrAppend(&out, "rank ", std::string(rank_width - label.size(), ' '), label, " | ", row,
                    "\n");
  }
  return out;
}

// Groups whose traffic should stay inside a node, and what crossing costs.
struct SpanCheck {
  GroupKind kind;
  const char* severity;
  const char* consequence;
  const char* hint;  // may be empty
};
constexpr SpanCheck kSpanChecks[] = {
    {GroupKind::kTensor, "warning",
     "their all-reduces run in every layer and need the bandwidth inside a node",
     "make parallel.tensor a divisor of the GPUs per node"},
    {GroupKind::kContext, "warning",
     "their ring passes keys and values in every attention layer, hidden only while a block's "
     "attention takes "
     "longer",
     "tetra plan --cluster predicts how much of the ring a layout hides"},
    {GroupKind::kExpert, "note", "their token all-to-all crosses the network", ""},
};

// Layouts that run, but slowly: one message each, ready for "tetra: ".
std::vector<std::string> PlanWarnings(const Mesh& mesh, int gpus_per_node) {
  std::vector<std::string> warnings;
  const int world = mesh.shape().world;
  if (world > gpus_per_node && world % gpus_per_node != 0) {
    warnings.push_back(absl::StrCat("warning: the world size ", world, " is not a multiple of ",
                                    gpus_per_node, " GPUs per node, so the last node runs ",
                                    world % gpus_per_node, " ranks"));
  }
  for (const SpanCheck& check : kSpanChecks) {
    const std::vector<std::vector<int>>& groups = mesh.Groups(check.kind);
    int spanning = 0;
    const std::vector<int>* example = nullptr;
    for (const std::vector<int>& group : groups) {
      if (group.front() / gpus_per_node != group.back() / gpus_per_node) {
        ++spanning;
        if (example == nullptr) example = &group;
      }
    }
    if (spanning == 0) continue;
    warnings.push_back(absl::StrCat(
        check.severity, ": ", spanning, " of ", groups.size(), " ", GroupKindName(check.kind),
        " groups span nodes of ", gpus_per_node, " GPUs, e.g. ", GroupText(*example), " on nodes ",
        example->front() / gpus_per_node, " to ", example->back() / gpus_per_node, "; ",
        check.consequence, *check.hint ? "\nhint: " : "", check.hint));
  }
  return warnings;
}

}  // namespace

absl::Status PlanCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(PlanOptions options, ParseOptions(argc, argv));
  // Not ValidateConfig: plan checks layouts for any world size, nothing else.
  ASSIGN_OR_RETURN(TrainerConfig config, LoadRecipe(options.config_path, options.sets));
  if (!options.cluster_path.empty()) {
    RETURN_IF_ERROR(ValidatePlannerInputs(config));  // the planner reads the model and the batch
    ASSIGN_OR_RETURN(ClusterConfig cluster, LoadClusterFile(options.cluster_path));
    const int64_t devices = int64_t{cluster.nodes()} * cluster.devices_per_node();
    RETURN_IF_ERROR(CheckWorld(options.world > 0 ? options.world : devices,
                               "the cluster's nodes x devices_per_node"));
    const int world = options.world > 0 ? options.world : static_cast<int>(devices);
    const std::vector<LayoutPrediction> plans = PlanLayouts(config, cluster, world);
    const PlannedModel model = PlannedModelOf(config.model());
    if (options.json) {
      std::cout << PredictionsJson(model, plans);
    } else {
      std::cout << absl::StrFormat("model: %s, %.3g parameters\n", model.architecture,
                                   double(model.parameters))
                << PlanReport(plans, cluster, kPlanRows);
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(config.parallel(), options.world));
  if (options.json) {
    std::cout << PlanJson(mesh);
  } else {
    std::string text = PlanText(mesh, options.gpus_per_node);
    if (mesh.shape().pp > 1) {
      ASSIGN_OR_RETURN(std::string schedule, ScheduleText(config, mesh.shape()));
      absl::StrAppend(&text, "\n", schedule);
    }
    std::cout << text;
  }
  for (const std::string& warning : PlanWarnings(mesh, options.gpus_per_node)) {
    std::cerr << "tetra: " << warning << "\n";
  }
  return absl::OkStatus();
}

}  // namespace tetra
