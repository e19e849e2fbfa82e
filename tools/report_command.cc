#include "tools/report_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/atomic_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"
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

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

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

// A bar chart: one group per category, one bar per series (or one stacked bar).
std::string BarChart(const std::string& title, const std::vector<std::string>& categories,
                     const std::vector<std::pair<std::string, std::vector<double>>>& series,
                     const std::vector<std::string>& colors, bool stacked,
                     const std::string& unit) {
  constexpr double kWidth = 720, kHeight = 300, kLeft = 70, kBottom = 60, kTop = 40, kLegend = 150;
  const double plot_w = kWidth - kLeft - kLegend, plot_h = kHeight - kTop - kBottom;
  double top = 0;
  for (size_t c = 0; c < categories.size(); ++c) {
    double sum = 0;
    for (const auto& [name, values] : series) {
      sum = stacked ? sum + values[c] : std::max(sum, values[c]);
    }
    top = std::max(top, sum);
  }
  if (top <= 0) top = 1;
  top *= 1.1;
  std::string svg = absl::StrFormat(
      R"j(<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" role="img">)j"
      "\n<title>%s</title>\n<text x=\"%g\" y=\"22\" font-size=\"15\" "
      "font-weight=\"bold\">%s</text>\n",
      kWidth, kHeight, kWidth, kHeight, Escape(title), kLeft, Escape(title));
  // Axis with 4 ticks.
  for (int t = 0; t <= 4; ++t) {
    const double value = top * t / 4, y = kTop + plot_h * (1 - t / 4.0);
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%g\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
        kLeft, y, kLeft + plot_w, y, kLeft - 5, y + 4, Escape(absl::StrFormat("%.3g", value)));
  }
  absl::StrAppendFormat(
      &svg, "<text x=\"12\" y=\"%g\" font-size=\"11\" transform=\"rotate(-90 12 %g)\">%s</text>\n",
      kTop + plot_h / 2, kTop + plot_h / 2, Escape(unit));
  const double group_w = plot_w / std::max<size_t>(1, categories.size());
  const size_t bars = stacked ? 1 : series.size();
  const double bar_w = group_w * 0.7 / bars;
  for (size_t c = 0; c < categories.size(); ++c) {
    const double x0 = kLeft + group_w * c + group_w * 0.15;
    double base = 0;
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = series[s].second[c];
      if (!std::isfinite(v)) continue;
      const double h = plot_h * v / top;
      const double x = stacked ? x0 : x0 + bar_w * s;
      const double y = kTop + plot_h - plot_h * base / top - h;
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
          "<title>%s, %s: %s %s</title></rect>\n",
          x, y, bar_w, h, colors[s % colors.size()], Escape(categories[c]), Escape(series[s].first),
          Num(v), Escape(unit));
      if (stacked) base += v;
    }
    absl::StrAppendFormat(
        &svg, "<text x=\"%.1f\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
        kLeft + group_w * (c + 0.5), kTop + plot_h + 16, Escape(categories[c]));
  }
  for (size_t s = 0; s < series.size(); ++s) {
    const double y = kTop + 16 * s;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%g\" y=\"%g\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%g\" y=\"%g\" font-size=\"12\">%s</text>\n",
                          kWidth - kLegend + 10, y, colors[s % colors.size()],
                          kWidth - kLegend + 28, y + 10, Escape(series[s].first));
  }
  return svg + "</svg>\n";
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

absl::StatusOr<std::vector<Row>> BuildRows(const ReportOptions& o) {
  std::vector<Row> rows;
  for (const std::string& path : o.runs) {
    ASSIGN_OR_RETURN(RunSummary run, ReadRun(path));
    Row r;
    r.run = run;
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.run.layout.mesh.world < b.run.layout.mesh.world;
  });
  std::optional<TrainerConfig> config;
  std::optional<ClusterConfig> cluster;
  if (!o.config_path.empty()) {
    ASSIGN_OR_RETURN(config, LoadRecipe(o.config_path, o.sets));
    RETURN_IF_ERROR(ValidatePlannerInputs(*config));  // the planner predicts each run from it
    ASSIGN_OR_RETURN(cluster, LoadClusterFile(o.cluster_path));
  }
  const RunLayout& base = rows.front().run.layout;
  const double base_tokens_per_s = rows.front().run.tokens_per_s;
  for (Row& r : rows) {
    const RunSummary& run = r.run;
    const RunLayout& l = run.layout;
    if (l.mesh.pp > 1) {
      ASSIGN_OR_RETURN(r.schedule, RunScheduleSpec(l));  // ReadRun checked it
      r.bubble_theory = IdealBubbleFraction(*r.schedule);
    }
    // Pipelined runs name a schedule other than 1F1B.
    const bool named_schedule = r.schedule && r.schedule->kind != ScheduleKind::kOneFOneB;
    r.name = absl::StrFormat(
        "%d ranks: tp %d x pp %d x dp %d%s%s", l.mesh.world, l.mesh.tp, l.mesh.pp, l.mesh.dp,
        l.mesh.ep > 1 ? absl::StrCat(" (ep ", l.mesh.ep, ")") : "",
        named_schedule ? absl::StrCat(", ", ScheduleKindName(r.schedule->kind)) : "");
    r.efficiency = (run.tokens_per_s / l.mesh.world) / (base_tokens_per_s / base.mesh.world);
    r.scaling = l.mesh.world == base.mesh.world                 ? "baseline"
                : l.global_batch_size == base.global_batch_size ? "strong"
                : l.global_batch_size * base.mesh.world == base.global_batch_size * l.mesh.world
                    ? "weak"
                    : "mixed";
    // fwd_s and bwd_s hold the TP collectives they block on.
    r.tp = run.comm_tp_s;
    r.compute = std::max(0.0, run.fwd_s + run.bwd_s - run.comm_tp_s);
    r.dp = run.comm_dp_s;
    r.pp = run.comm_pp_s;
    r.ep = run.comm_ep_s;
    r.optimizer = run.optimizer_s;
    r.other =
        std::max(0.0, run.step_time_s - (r.compute + r.tp + r.dp + r.pp + r.ep + r.optimizer));
    if (config) {
      TrainerConfig c = *config;
      // The run's schedule, which the planner's bubble and memory follow.
      c.mutable_parallel()->set_schedule(l.schedule);
      c.mutable_parallel()->set_virtual_stages(l.virtual_stages);
      c.mutable_train()->set_global_batch_size(l.global_batch_size);
      c.mutable_train()->set_micro_batch_size(l.micro_batch_size);
      c.mutable_train()->set_seq_length(l.seq_length);
      r.predicted = PredictLayout(c, *cluster, {l.mesh, l.zero_stage, c.train().recompute()});
    }
  }
  return rows;
}

}  // namespace

absl::Status ReportCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(ReportOptions o, ParseReportOptions(argc, argv));
  ASSIGN_OR_RETURN(std::vector<Row> rows, BuildRows(o));
  std::vector<std::string> names;
  for (const Row& r : rows) names.push_back(r.name);

  std::vector<Table> tables;
  Table scaling{"Throughput and scaling",
                {"run", "file", "global batch", "steps", "step s (median)", "step s (best)",
                 "tokens/s (median)", "scaling efficiency", "scaling"},
                {}};
  for (const Row& r : rows) {
    scaling.rows.push_back({r.name, std::filesystem::path(r.run.path).filename().string(),
                            absl::StrCat(r.run.layout.global_batch_size), absl::StrCat(r.run.steps),
                            Num(r.run.step_time_s), Num(r.run.best_step_time_s),
                            Num(r.run.tokens_per_s), Num(r.efficiency), r.scaling});
  }
  tables.push_back(scaling);
  Table breakdown{"Time breakdown of the median step (seconds)", {"run"}, {}};
  for (const char* part : kParts) breakdown.header.push_back(part);
  for (const Row& r : rows) {
    std::vector<std::string> row = {r.name};
    for (double v : Parts(r)) row.push_back(Num(v));
    breakdown.rows.push_back(row);
  }
  tables.push_back(breakdown);
  const bool predicted = rows.front().predicted.has_value();
  if (predicted) {
    Table prediction{
        "Measured and predicted step time",
        {"run", "measured s (best)", "measured s (median)", "predicted s", "error vs best"},
        {}};
    for (const Row& r : rows) {
      const double p = r.predicted->time.step_s();
      prediction.rows.push_back(
          {r.name, Num(r.run.best_step_time_s), Num(r.run.step_time_s), Num(p),
           absl::StrFormat("%+.1f%%", 100 * (p / r.run.best_step_time_s - 1))});
    }
    tables.push_back(prediction);
  }
  // The theory is each run's schedule's, with its formula.
  Table bubble{"Pipeline bubble",
               {"run", "schedule", "micro-batches", "chunks per rank", "measured", "theory",
                "theory's formula"},
               {}};
  for (const Row& r : rows) {
    if (!r.bubble_theory) continue;
    bubble.rows.push_back(
        {r.name, ScheduleKindName(r.schedule->kind), absl::StrCat(r.schedule->micro_batches),
         absl::StrCat(r.schedule->virtual_stages), Num(r.run.bubble_fraction.value_or(NAN)),
         Num(*r.bubble_theory), IdealBubbleFormula(*r.schedule)});
  }
  if (!bubble.rows.empty()) tables.push_back(bubble);

  // Charts.
  std::vector<double> throughput, efficiency, measured, predicted_s, bubble_measured, bubble_theory;
  std::vector<std::string> bubble_names;
  for (const Row& r : rows) {
    throughput.push_back(r.run.tokens_per_s);
    efficiency.push_back(r.efficiency);
    measured.push_back(r.run.best_step_time_s);
    predicted_s.push_back(r.predicted ? r.predicted->time.step_s() : NAN);
    if (r.bubble_theory) {
      bubble_names.push_back(r.name);
      bubble_measured.push_back(r.run.bubble_fraction.value_or(NAN));
      bubble_theory.push_back(*r.bubble_theory);
    }
  }
  std::vector<std::pair<std::string, std::vector<double>>> parts;
  for (size_t p = 0; p < std::size(kParts); ++p) {
    std::vector<double> values;
    for (const Row& r : rows) values.push_back(Parts(r)[p]);
    parts.emplace_back(kParts[p], values);
  }
  const std::vector<std::string> colors(std::begin(kColors), std::end(kColors));
  std::vector<std::string> charts = {
      BarChart("Throughput", names, {{"tokens/s", throughput}}, colors, false, "tokens/s"),
      BarChart("Scaling efficiency against the smallest run", names, {{"efficiency", efficiency}},
               {"#59a14f"}, false, "per-rank throughput ratio"),
      BarChart("Where the median step's time went", names, parts, colors, true, "seconds"),
  };
  if (predicted) {
    charts.push_back(BarChart("Measured and predicted step time", names,
                              {{"measured (best)", measured}, {"predicted", predicted_s}},
                              {"#4e79a7", "#f28e2b"}, false, "seconds"));
  }
  if (!bubble_names.empty()) {
    charts.push_back(BarChart("Pipeline bubble", bubble_names,
                              {{"measured", bubble_measured}, {"theory", bubble_theory}},
                              {"#76b7b2", "#bab0ac"}, false, "fraction of the step"));
  }

  const std::string intro = absl::StrCat(
      "Runs: ", rows.size(),
      ". Statistics are over the steps after the first. Scaling efficiency is per-rank "
      "throughput against the smallest run's (strong: same global batch; weak: the batch grows "
      "with the ranks).");
  std::string md = absl::StrCat("# tetra scaling report\n\n", intro, "\n\n");
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta "
      "charset=\"utf-8\"/>\n"
      "<title>tetra scaling "
      "report</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
      "table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:3px "
      "8px;"
      "text-align:right}th{background:#f3f3f3}svg{display:block;margin:1em "
      "0}</style>\n</head>\n<body>\n"
      "<h1>tetra scaling report</h1>\n<p>",
      Escape(intro), "</p>\n");
  for (const Table& t : tables) {
    md += MarkdownTable(t);
    html += HtmlTable(t);
  }
  for (const std::string& chart : charts) html += chart;
  html += "</body>\n</html>\n";

  std::error_code ignored;  // the writes below report a directory that could not be made
  std::filesystem::create_directories(o.out, ignored);
  for (const auto& [name, text] : {std::pair{"report.md", md}, std::pair{"report.html", html}}) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(o.out, "/", name), text,
                                        "point --out at a writable directory"));
  }
  std::cout << "tetra: report written to " << o.out << "/report.html and report.md\n";
  return absl::OkStatus();
}

}  // namespace tetra
