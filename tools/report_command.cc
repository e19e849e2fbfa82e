#include "tools/report_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/atomic_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "observe/number_format.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_checker.h"
#include "plan/cluster_config.h"
#include "plan/layout_planner.h"
#include "tools/run_summary.h"
#include "train/config_loader.h"
#include "train/config_validation.h"

namespace tetra {
namespace {

struct ReportOptions {
  std::string out, config_path, cluster_path;
  std::vector<std::string> sets, runs;
};

absl::StatusOr<ReportOptions> ParseReportOptions(int argc, char** argv) {
  ReportOptions o;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string* target = arg == "--out"       ? &o.out
                          : arg == "--config"  ? &o.config_path
                          : arg == "--cluster" ? &o.cluster_path
                                               : nullptr;
    if (target != nullptr || arg == "--set") {
      if (i + 1 == argc) {
        return UserError(absl::StrCat("tetra report: ", arg, " needs a value"),
                         "tetra report --out DIR RUN.jsonl ...");
      }
      if (target != nullptr)
        *target = argv[++i];
      else
        o.sets.push_back(argv[++i]);
    } else if (arg.rfind("--", 0) == 0) {
      return UserError(absl::StrCat("tetra report: unknown flag ", arg),
                       "tetra report takes --out, --config, --cluster, --set and metrics files");
    } else {
      o.runs.push_back(arg);
    }
  }
  if (o.out.empty() || o.runs.empty()) {
    return UserError("tetra report needs --out DIR and at least one metrics file",
                     "tetra report --out report/ runs/w1.jsonl runs/w8.jsonl");
  }
  if (o.config_path.empty() != o.cluster_path.empty()) {
    return UserError("tetra report: predictions need both --config and --cluster",
                     "add --config F.textproto --cluster configs/clusters/C.textproto, or neither");
  }
  return o;
}

// One run's row: its summary with what the report derives from it.
struct Row {
  RunSummary run;
  std::string name;   // "8 ranks: tp 2 x pp 2 x dp 2"
  double efficiency;  // per-rank throughput against the baseline's
  std::string scaling;
  // Stacked breakdown of the median step (seconds).
  double compute, tp, dp, pp, ep, optimizer, other;
  std::optional<LayoutPrediction> predicted;
  std::optional<ScheduleSpec> schedule;  // pipelined runs: what they ran
  std::optional<double> bubble_theory;   // its IdealBubbleFraction
};

constexpr const char* kParts[] = {"compute", "tp comm",   "dp comm", "pp wait",
                                  "ep comm", "optimizer", "other"};
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                   "#59a14f", "#edc948", "#bab0ac"};

std::vector<double> Parts(const Row& r) {
  return {r.compute, r.tp, r.dp, r.pp, r.ep, r.optimizer, r.other};
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// A bar chart: one group per category, one bar per series (or one stacked
// bar), on an axis from 0 at 1-2-5 steps labelled in the values' unit.
struct Chart {
  std::string title{};
  std::vector<std::string> categories{};
  std::vector<std::pair<std::string, std::vector<double>>> series{};  // name, a value per category
  std::vector<std::string> colors{};                                  // one per series, in turn
  bool stacked = false;
  ValueKind kind = ValueKind::kQuantity;
  std::string axis_title{};  // what the values are ("tokens/s", "time")
};

// The chart's geometry (SVG user units).
constexpr double kWidth = 800, kHeight = 320, kLeft = 80, kBottom = 70, kTop = 40, kLegend = 150;
constexpr double kPlotW = kWidth - kLeft - kLegend, kPlotH = kHeight - kTop - kBottom;

// The tallest group: its largest bar, or its stacked bar's sum.
double ChartMax(const Chart& chart) {
  double top = 0;
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    double sum = 0;
    for (const auto& [name, values] : chart.series) {
      if (!std::isfinite(values[c])) continue;
      sum = chart.stacked ? sum + values[c] : std::max(sum, values[c]);
    }
    top = std::max(top, sum);
  }
  return top;
}

// Grid lines at the axis's ticks, their labels, and the axis's title.
std::string AxisSvg(const Axis& axis, const std::string& axis_title) {
  std::string svg;
  for (int t = 0; t <= axis.intervals; ++t) {
    const double y = kTop + kPlotH * (1 - static_cast<double>(t) / axis.intervals);
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text class=\"tick\" x=\"%g\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
        kLeft, y, kLeft + kPlotW, y, kLeft - 5, y + 4, Escape(axis.labels[t]));
  }
  absl::StrAppendFormat(&svg,
                        "<text class=\"axis-title\" x=\"14\" y=\"%g\" font-size=\"11\" "
                        "text-anchor=\"middle\" transform=\"rotate(-90 14 %g)\">%s</text>\n",
                        kTop + kPlotH / 2, kTop + kPlotH / 2, Escape(axis_title));
  return svg;
}

// A category's name under its group, a line per part ("8 ranks", "tp 2 x pp 2 x dp 2", "ZB-H1").
std::string CategoryLabel(double x, const std::string& name) {
  std::string svg = absl::StrFormat(
      "<text class=\"category\" x=\"%.1f\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">", x,
      kTop + kPlotH + 16);
  const std::vector<std::string> lines = absl::StrSplit(name, absl::ByAnyChar(":,"));
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::StrAppendFormat(&svg, "<tspan x=\"%.1f\" dy=\"%s\">%s</tspan>", x, i == 0 ? "0" : "1.2em",
                          Escape(std::string(absl::StripAsciiWhitespace(lines[i]))));
  }
  return svg + "</text>\n";
}

std::string BarsSvg(const Chart& chart, const Axis& axis) {
  std::string svg;
  const double group_w = kPlotW / std::max<size_t>(1, chart.categories.size());
  const double bar_w = group_w * 0.7 / (chart.stacked ? 1 : chart.series.size());
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double x0 = kLeft + group_w * c + group_w * 0.15;
    double base = 0;
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = chart.series[s].second[c];
      if (!std::isfinite(v)) continue;
      const double h = kPlotH * v / axis.top();
      const double x = chart.stacked ? x0 : x0 + bar_w * s;
      const double y = kTop + kPlotH - kPlotH * base / axis.top() - h;
      absl::StrAppendFormat(&svg,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                            "fill=\"%s\"><title>%s, %s: %s</title></rect>\n",
                            x, y, bar_w, h, chart.colors[s % chart.colors.size()],
                            Escape(chart.categories[c]), Escape(chart.series[s].first),
                            Escape(FormatValue(v, chart.kind)));
      if (chart.stacked) base += v;
    }
    svg += CategoryLabel(kLeft + group_w * (c + 0.5), chart.categories[c]);
  }
  return svg;
}

std::string LegendSvg(const Chart& chart) {
  std::string svg;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const double y = kTop + 18 * s;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%g\" y=\"%g\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text class=\"legend\" x=\"%g\" y=\"%g\" font-size=\"12\">%s</text>\n",
                          kWidth - kLegend + 10, y, chart.colors[s % chart.colors.size()],
                          kWidth - kLegend + 28, y + 10, Escape(chart.series[s].first));
  }
  return svg;
}

std::string BarChart(const Chart& chart) {
  const Axis axis = NiceAxis(ChartMax(chart), chart.kind);
  return absl::StrCat(
      absl::StrFormat(
          R"(<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" )"
          "role=\"img\">\n<title>%s</title>\n<text class=\"chart-title\" x=\"%g\" y=\"22\" "
          "font-size=\"15\" font-weight=\"bold\">%s</text>\n",
          kWidth, kHeight, kWidth, kHeight, Escape(chart.title), kLeft, Escape(chart.title)),
      AxisSvg(axis, chart.axis_title), BarsSvg(chart, axis), LegendSvg(chart), "</svg>\n");
}

// Markdown table rows double as the HTML tables' content.
struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

std::string MarkdownTable(const Table& t) {
  std::string md = absl::StrCat("## ", t.title, "\n\n| ", absl::StrJoin(t.header, " | "), " |\n|");
  for (size_t i = 0; i < t.header.size(); ++i) md += " --- |";
  md += "\n";
  for (const auto& row : t.rows) absl::StrAppend(&md, "| ", absl::StrJoin(row, " | "), " |\n");
  return md + "\n";
}

std::string HtmlTable(const Table& t) {
  std::string html = absl::StrCat("<h2>", Escape(t.title), "</h2>\n<table>\n<tr>");
  for (const auto& h : t.header) absl::StrAppend(&html, "<th>", Escape(h), "</th>");
  html += "</tr>\n";
  for (const auto& row : t.rows) {
    html += "<tr>";
    for (const auto& cell : row) absl::StrAppend(&html, "<td>", Escape(cell), "</td>");
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

// Every run's summary, smallest world first (the scaling baseline).
absl::StatusOr<std::vector<Row>> ReadRows(const std::vector<std::string>& paths) {
  std::vector<Row> rows;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(RunSummary run, ReadRun(path));
    Row r;
    r.run = run;
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.run.layout.mesh.world < b.run.layout.mesh.world;
  });
  return rows;
}

// The row's name, scaling against `base` (the smallest run) and time breakdown.
absl::Status DescribeRow(const RunSummary& base, Row* row) {
  Row& r = *row;
  const RunSummary& run = r.run;
  const RunLayout& l = run.layout;
  const RunLayout& b = base.layout;
  if (l.mesh.pp > 1) {
    ASSIGN_OR_RETURN(r.schedule, RunScheduleSpec(l));  // ReadRun checked it
    r.bubble_theory = IdealBubbleFraction(*r.schedule);
  }
  // Pipelined runs name a schedule other than 1F1B.
  const bool named_schedule = r.schedule && r.schedule->kind != ScheduleKind::kOneFOneB;
  r.name = absl::StrFormat(
      "%s: tp %d x pp %d x dp %d%s%s", CountOf(l.mesh.world, "rank"), l.mesh.tp, l.mesh.pp,
      l.mesh.dp, l.mesh.ep > 1 ? absl::StrCat(" (ep ", l.mesh.ep, ")") : "",
      named_schedule ? absl::StrCat(", ", ScheduleKindName(r.schedule->kind)) : "");
  r.efficiency = (run.tokens_per_s / l.mesh.world) / (base.tokens_per_s / b.mesh.world);
  r.scaling = l.mesh.world == b.mesh.world                 ? "baseline"
              : l.global_batch_size == b.global_batch_size ? "strong"
              : l.global_batch_size * b.mesh.world == b.global_batch_size * l.mesh.world ? "weak"
                                                                                         : "mixed";
  // fwd_s and bwd_s hold the TP collectives they block on.
  r.tp = run.comm_tp_s;
  r.compute = std::max(0.0, run.fwd_s + run.bwd_s - run.comm_tp_s);
  r.dp = run.comm_dp_s;
  r.pp = run.comm_pp_s;
  r.ep = run.comm_ep_s;
  r.optimizer = run.optimizer_s;
  r.other = std::max(0.0, run.step_time_s - (r.compute + r.tp + r.dp + r.pp + r.ep + r.optimizer));
  return absl::OkStatus();
}

// The planner's prediction for the run's layout, batch shape and schedule.
LayoutPrediction PredictRow(const TrainerConfig& config, const ClusterConfig& cluster,
                            const RunLayout& l) {
  TrainerConfig c = config;
  c.mutable_parallel()->set_schedule(l.schedule);
  c.mutable_parallel()->set_virtual_stages(l.virtual_stages);
  c.mutable_train()->set_global_batch_size(l.global_batch_size);
  c.mutable_train()->set_micro_batch_size(l.micro_batch_size);
  c.mutable_train()->set_seq_length(l.seq_length);
  return PredictLayout(c, cluster, {l.mesh, l.zero_stage, c.train().recompute()});
}

absl::StatusOr<std::vector<Row>> BuildRows(const ReportOptions& o) {
  ASSIGN_OR_RETURN(std::vector<Row> rows, ReadRows(o.runs));
  std::optional<TrainerConfig> config;
  std::optional<ClusterConfig> cluster;
  if (!o.config_path.empty()) {
    ASSIGN_OR_RETURN(config, LoadRecipe(o.config_path, o.sets));
    RETURN_IF_ERROR(ValidatePlannerInputs(*config));  // the planner predicts each run from it
    ASSIGN_OR_RETURN(cluster, LoadClusterFile(o.cluster_path));
  }
  const RunSummary& base = rows.front().run;  // DescribeRow leaves runs as they are
  for (Row& r : rows) {
    RETURN_IF_ERROR(DescribeRow(base, &r));
    if (config) r.predicted = PredictRow(*config, *cluster, r.run.layout);
  }
  return rows;
}

Table ScalingTable(const std::vector<Row>& rows) {
  Table t{"Throughput and scaling",
          {"run", "file", "global batch", "steps", "step time (median)", "step time (best)",
           "tokens/s (median)", "scaling efficiency", "scaling"},
          {}};
  for (const Row& r : rows) {
    t.rows.push_back({r.name, std::filesystem::path(r.run.path).filename().string(),
                      FormatInteger(r.run.layout.global_batch_size), FormatInteger(r.run.steps),
                      FormatDuration(r.run.step_time_s), FormatDuration(r.run.best_step_time_s),
                      FormatQuantity(r.run.tokens_per_s), FormatPercent(r.efficiency), r.scaling});
  }
  return t;
}

Table BreakdownTable(const std::vector<Row>& rows) {
  Table t{"Time breakdown of the median step", {"run"}, {}};
  for (const char* part : kParts) t.header.push_back(part);
  for (const Row& r : rows) {
    std::vector<std::string> row = {r.name};
    for (double v : Parts(r)) row.push_back(FormatDuration(v));
    t.rows.push_back(row);
  }
  return t;
}

Table PredictionTable(const std::vector<Row>& rows) {
  Table t{"Measured and predicted step time",
          {"run", "measured (best)", "measured (median)", "predicted", "error vs best"},
          {}};
  for (const Row& r : rows) {
    const double p = r.predicted->time.step_s();
    t.rows.push_back({r.name, FormatDuration(r.run.best_step_time_s),
                      FormatDuration(r.run.step_time_s), FormatDuration(p),
                      absl::StrFormat("%+.1f%%", 100 * (p / r.run.best_step_time_s - 1))});
  }
  return t;
}

// The pipelined runs' bubble: the theory is each run's schedule's, with its formula.
Table BubbleTable(const std::vector<Row>& rows) {
  Table t{"Pipeline bubble",
          {"run", "schedule", "micro-batches", "chunks per rank", "measured", "theory",
           "theory's formula"},
          {}};
  for (const Row& r : rows) {
    if (!r.bubble_theory) continue;
    t.rows.push_back({r.name, ScheduleKindName(r.schedule->kind),
                      FormatInteger(r.schedule->micro_batches),
                      FormatInteger(r.schedule->virtual_stages),
                      FormatPercent(r.run.bubble_fraction.value_or(NAN)),
                      FormatPercent(*r.bubble_theory), IdealBubbleFormula(*r.schedule)});
  }
  return t;
}

// The multi-rank runs' slowest rank: the one most often the slowest, and by how much.
Table StragglerTable(const std::vector<Row>& rows) {
  Table t{
      "Slowest rank",
      {"run", "slowest rank (most steps)", "steps it was the slowest", "straggler ratio (median)"},
      {}};
  for (const Row& r : rows) {
    if (!r.run.slowest_rank) continue;
    t.rows.push_back({r.name, FormatInteger(*r.run.slowest_rank),
                      absl::StrCat(FormatInteger(r.run.slowest_rank_steps), " of ",
                                   FormatInteger(r.run.compared_steps)),
                      absl::StrFormat("%.2fx", *r.run.straggler_ratio)});
  }
  return t;
}

std::vector<Table> Tables(const std::vector<Row>& rows) {
  std::vector<Table> tables = {ScalingTable(rows), BreakdownTable(rows)};
  if (rows.front().predicted) tables.push_back(PredictionTable(rows));
  if (Table bubble = BubbleTable(rows); !bubble.rows.empty()) tables.push_back(bubble);
  if (Table stragglers = StragglerTable(rows); !stragglers.rows.empty()) {
    tables.push_back(stragglers);
  }
  return tables;
}

// One value per row.
template <typename F>
std::vector<double> Column(const std::vector<Row>& rows, F value) {
  std::vector<double> out;
  for (const Row& r : rows) out.push_back(value(r));
  return out;
}

// The pipelined runs' measured bubble against their schedules' theory.
Chart BubbleChart(const std::vector<Row>& rows) {
  Chart chart{.title = "Pipeline bubble",
              .series = {{"measured", {}}, {"theory", {}}},
              .colors = {"#76b7b2", "#bab0ac"},
              .kind = ValueKind::kFraction,
              .axis_title = "share of the step"};
  for (const Row& r : rows) {
    if (!r.bubble_theory) continue;
    chart.categories.push_back(r.name);
    chart.series[0].second.push_back(r.run.bubble_fraction.value_or(NAN));
    chart.series[1].second.push_back(*r.bubble_theory);
  }
  return chart;
}

std::vector<Chart> Charts(const std::vector<Row>& rows) {
  std::vector<std::string> names;
  for (const Row& r : rows) names.push_back(r.name);
  const std::vector<std::string> colors(std::begin(kColors), std::end(kColors));
  std::vector<Chart> charts;
  charts.push_back(
      {.title = "Throughput",
       .categories = names,
       .series = {{"tokens/s", Column(rows, [](const Row& r) { return r.run.tokens_per_s; })}},
       .colors = colors,
       .kind = ValueKind::kQuantity,
       .axis_title = "tokens/s"});
  charts.push_back(
      {.title = "Scaling efficiency against the smallest run",
       .categories = names,
       .series = {{"efficiency", Column(rows, [](const Row& r) { return r.efficiency; })}},
       .colors = {"#59a14f"},
       .kind = ValueKind::kFraction,
       .axis_title = "per-rank throughput against the smallest run's"});
  Chart breakdown{.title = "Where the median step's time went",
                  .categories = names,
                  .colors = colors,
                  .stacked = true,
                  .kind = ValueKind::kSeconds,
                  .axis_title = "time"};
  for (size_t p = 0; p < std::size(kParts); ++p) {
    breakdown.series.emplace_back(kParts[p],
                                  Column(rows, [p](const Row& r) { return Parts(r)[p]; }));
  }
  charts.push_back(breakdown);
  if (rows.front().predicted) {
    charts.push_back(
        {.title = "Measured and predicted step time",
         .categories = names,
         .series = {{"measured (best)",
                     Column(rows, [](const Row& r) { return r.run.best_step_time_s; })},
                    {"predicted",
                     Column(rows, [](const Row& r) { return r.predicted->time.step_s(); })}},
         .colors = {"#4e79a7", "#f28e2b"},
         .kind = ValueKind::kSeconds,
         .axis_title = "step time"});
  }
  if (Chart bubble = BubbleChart(rows); !bubble.categories.empty()) charts.push_back(bubble);
  return charts;
}

// "4 runs of 1 to 8 ranks. ...", "1 run of 1 rank. ..."
std::string Intro(const std::vector<Row>& rows) {
  const int smallest = rows.front().run.layout.mesh.world;
  const int largest = rows.back().run.layout.mesh.world;
  return absl::StrCat(
      CountOf(rows.size(), "run"), " of ",
      smallest == largest ? "" : absl::StrCat(FormatInteger(smallest), " to "),
      CountOf(largest, "rank"),
      ". Statistics are over the steps after the first. Scaling efficiency is per-rank "
      "throughput against the smallest run's (strong: same global batch; weak: the batch grows "
      "with the ranks).");
}

constexpr char kHtmlHead[] =
    "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
    "<meta charset=\"utf-8\"/>\n<title>tetra scaling report</title>\n<style>"
    "body{font-family:sans-serif;margin:2em;max-width:1100px}"
    "table{border-collapse:collapse;margin-bottom:1em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td+td{white-space:nowrap}"
    "td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}"
    "svg{display:block;margin:1em 0}</style>\n</head>\n<body>\n<h1>tetra scaling report</h1>\n";

// report.md and report.html in `out`.
absl::Status WriteReport(const std::string& out, const std::string& intro,
                         const std::vector<Table>& tables, const std::vector<Chart>& charts) {
  std::string md = absl::StrCat("# tetra scaling report\n\n", intro, "\n\n");
  std::string html = absl::StrCat(kHtmlHead, "<p>", Escape(intro), "</p>\n");
  for (const Table& t : tables) {
    md += MarkdownTable(t);
    html += HtmlTable(t);
  }
  for (const Chart& chart : charts) html += BarChart(chart);
  html += "</body>\n</html>\n";
  std::error_code ignored;  // the writes below report a directory that could not be made
  std::filesystem::create_directories(out, ignored);
  for (const auto& [name, text] : {std::pair{"report.md", md}, std::pair{"report.html", html}}) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(out, "/", name), text,
                                        "point --out at a writable directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReportCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(ReportOptions o, ParseReportOptions(argc, argv));
  ASSIGN_OR_RETURN(std::vector<Row> rows, BuildRows(o));
  RETURN_IF_ERROR(WriteReport(o.out, Intro(rows), Tables(rows), Charts(rows)));
  std::cout << "tetra: report on " << CountOf(rows.size(), "run") << " written to " << o.out
            << "/report.html and report.md\n";
  for (const Row& r : rows) {
    std::cout << "  " << r.name << ": " << FormatDuration(r.run.step_time_s) << " a step, "
              << FormatQuantity(r.run.tokens_per_s) << " tokens/s, " << FormatPercent(r.efficiency)
              << " scaling efficiency (" << r.scaling << ")\n";
  }
  return absl::OkStatus();
}

}  // namespace tetra
