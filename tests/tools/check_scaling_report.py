#!/usr/bin/env python3
"""The scaling study's report on this machine's CPU, end to end (issue 9):

1. runs configs/bench_cpu_scaling.textproto at 1, 2, 4 and 8 ranks (data,
   data, tensor x data, tensor x pipeline x data) and checks every metrics
   line carries `bubble_fraction` exactly when the layout is pipelined,
   strictly between 0 and 1 there;
2. runs `tetra report` on the four metrics files with the CPU cluster
   description configs/clusters/cpu_2core.textproto and checks its Markdown
   tables against numbers computed here from the metrics files and from
   `tetra plan --json`, and that report.html is well-formed XHTML with inline
   SVG charts and nothing fetched from a network;
3. runs the pipelined layout again under parallel.schedule ZB_H1 and checks
   its metrics name the schedule, and that `tetra report` on it and the 1F1B
   run gives each its own schedule's theory of the bubble (ZB-H1's
   (p-1)/(3*m+p-1) against 1F1B's (p-1)/(m+p-1)) and predicts its step with
   the schedule (`tetra plan --json --set parallel.schedule=ZB_H1`: a third
   of 1F1B's bubble, more activation memory).

   It then opens the page in a headless browser (chromium-headless-shell,
   which scripts/setup.sh installs) and checks the screenshot shows the page:
   mostly white, with a few percent of ink and the charts' coloured bars.

Nothing here depends on how fast or busy the machine is. How close the
calibrated planner's step time comes to the measured one is a benchmark:
tools/bench/bench_cpu_scaling.py.
usage: check_scaling_report.py TETRA_BINARY [MPIEXEC]
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench"))
import cpu_runs  # noqa: E402

# Tolerance of numbers compared here with each other (the planner's).
PRINTED_RELATIVE = 5e-6
# The report shows times at three significant digits in s, ms or us, tokens/s
# as whole numbers with thousands separators, efficiency and the bubble in
# percent with one decimal: a number it shows agrees with ours to half its
# last digit.
UNITS = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "%": 1e-2, None: 1}


def close(a, b):
    return abs(a - b) <= PRINTED_RELATIVE * max(abs(a), abs(b), 1e-12)


def shown(cell):
    """(value, the size of its last digit) of a report cell: "3.86 ms", "96,870", "82.5%"."""
    m = re.fullmatch(r"(-?\d{1,3}(?:,\d{3})*|-?\d+)(?:\.(\d+))? ?(s|ms|us|ns|%)?", cell)
    assert m, f"{cell!r} is not a number as the report shows one"
    whole, decimals, unit = m.groups()
    value = float(whole.replace(",", "") + (f".{decimals}" if decimals else ""))
    if value == 0 and not decimals:
        return 0.0, 0.0  # a plain 0 is shown for exactly 0 only
    return value * UNITS[unit], UNITS[unit] * 10.0 ** -len(decimals or "")


def agrees(cell, exact):
    """The report's `cell` is `exact` to the digits it shows."""
    value, last = shown(cell)
    return abs(value - exact) <= last / 2 * (1 + 1e-9) + 1e-15


def tables(markdown):
    """## title -> list of row dicts."""
    out, title, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("## "):
            title, header = line[3:], None
            out[title] = []
        elif line.startswith("|") and title:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
            elif not all(set(c) <= {"-", " "} for c in cells):
                out[title].append(dict(zip(header, cells)))
    return out


def check_report(tetra, out, cluster, runs):
    paths = [path for path, _, _ in runs]
    command = [tetra, "report", "--out", f"{out}/report", "--config", cpu_runs.CONFIG, "--cluster", cluster] + paths
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(f"{out}/report/report.md") as f:
        t = tables(f.read())
    scaling = t["Throughput and scaling"]
    breakdown = t["Time breakdown of the median step"]
    prediction = t["Measured and predicted step time"]
    assert len(scaling) == len(runs) == len(breakdown) == len(prediction), t
    base = None
    for (path, lines, plan), row, parts, pred in zip(runs, scaling, breakdown, prediction):
        steps = lines[1:]
        median = lambda key: statistics.median(m.get(key, 0) for m in steps)  # noqa: E731
        world = lines[0]["world_size"]
        assert row["file"] == os.path.basename(path), (row, path)
        assert int(row["global batch"]) == lines[0]["global_batch_size"]
        assert agrees(row["step time (median)"], median("step_time_s")), row
        assert agrees(row["step time (best)"], min(m["step_time_s"] for m in steps)), row
        tokens = median("tokens_per_s")
        assert agrees(row["tokens/s (median)"], tokens), row
        if base is None:
            base = (tokens, world)
        assert agrees(row["scaling efficiency"], (tokens / world) / (base[0] / base[1])), row
        compute = max(0.0, median("fwd_s") + median("bwd_s") - median("comm_exposed_s_tp"))
        assert agrees(parts["compute"], compute), parts
        for part, key in (("tp comm", "comm_exposed_s_tp"), ("dp comm", "comm_exposed_s_dp"),
                          ("pp wait", "comm_exposed_s_pp"), ("optimizer", "optimizer_s")):
            assert agrees(parts[part], median(key)), (part, parts)
        assert agrees(pred["predicted"], plan["step_s"]), (pred, plan)
    # One pipelined layout (the 8-rank run, pipeline 2): its measured bubble
    # is the metrics' median, its theory 1F1B's formula.
    pipelined = [(lines, row) for (_, lines, _), row in zip(runs, scaling) if lines[0]["pipeline"] > 1]
    bubble_rows = t.get("Pipeline bubble", [])
    assert len(bubble_rows) == len(pipelined) == 1, (bubble_rows, len(pipelined))
    for (lines, _), row in zip(pipelined, bubble_rows):
        check_bubble_row(row, lines, "1F1B", "(p-1)/(m+p-1)", 1)
    # The page: well-formed XHTML, inline SVG, no scripts, nothing remote.
    with open(f"{out}/report/report.html") as f:
        html = f.read()
    root = ET.fromstring(html.split("\n", 1)[1])  # after <!DOCTYPE html>
    svgs = root.findall(".//{http://www.w3.org/2000/svg}svg")
    assert len(svgs) >= 4, f"{len(svgs)} charts"
    assert not root.findall(".//{http://www.w3.org/1999/xhtml}script"), "the report has a script"
    remote = [u for u in re.findall(r'(?:src|href)="([^"]+)"', html)]
    assert not remote, f"the report links {remote}"
    print(f"report: {len(runs)} runs, tables agree with the metrics, {len(svgs)} SVG charts, XHTML well-formed")
    check_screenshot(f"{out}/report")


def check_bubble_row(row, lines, schedule, formula, backward_parts):
    """A "Pipeline bubble" row of the run of metrics `lines`: its schedule's
    name and formula, (p-1)/(k m+p-1) with k = 1 for a whole backward and 3
    for one split into input and weight gradients (B and W each as long as
    the forward, filling the bubble), and the measured median."""
    first = lines[0]
    m = first["global_batch_size"] // (first["micro_batch_size"] * first["data"])
    p = first["pipeline"]
    assert row["schedule"] == schedule and row["theory's formula"] == formula, row
    assert int(row["micro-batches"]) == m and row["chunks per rank"] == "1", row
    assert agrees(row["theory"], (p - 1) / (backward_parts * m + p - 1)), row
    assert agrees(row["measured"], statistics.median(x["bubble_fraction"] for x in lines[1:])), row


def check_zero_bubble_report(tetra, out, cluster, mpiexec, pipelined):
    """The pipelined layout under ZB-H1 beside its 1F1B run (`pipelined`:
    path, lines, plan)."""
    ranks = pipelined[1][0]["world_size"]
    sets = cpu_runs.LAYOUTS[ranks] + ["parallel.schedule=ZB_H1"]
    path = f"{out}/w{ranks}_zb_h1.jsonl"
    lines = cpu_runs.train(tetra, ranks, sets, path, mpiexec)
    assert lines[0]["schedule"] == "ZB_H1" and lines[0]["virtual_stages"] == 1, lines[0]
    assert pipelined[1][0]["schedule"] == "ONE_F_ONE_B", pipelined[1][0]
    plan = cpu_runs.predict(tetra, cluster, ranks, sets, cpu_runs.layout_of(sets, ranks))
    # The planner follows the schedule: its bubble is a third of 1F1B's ((p-1)/3
    # slots against p-1; both 0 on this machine, whose 2 cores stay busy with 8
    # ranks), and it keeps more activations, each rank p micro-batches and the
    # output gradients of those waiting for their W.
    assert close(3 * plan["bubble_s"], pipelined[2]["bubble_s"]), (plan, pipelined[2])
    assert plan["activations_bytes"] > pipelined[2]["activations_bytes"], (plan, pipelined[2])
    command = [tetra, "report", "--out", f"{out}/zb_report", "--config", cpu_runs.CONFIG, "--cluster", cluster,
               pipelined[0], path]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(f"{out}/zb_report/report.md") as f:
        t = tables(f.read())
    bubble_rows, prediction = t["Pipeline bubble"], t["Measured and predicted step time"]
    assert len(bubble_rows) == len(prediction) == 2, t
    check_bubble_row(bubble_rows[0], pipelined[1], "1F1B", "(p-1)/(m+p-1)", 1)
    check_bubble_row(bubble_rows[1], lines, "ZB-H1", "(p-1)/(3*m+p-1)", 3)
    assert bubble_rows[1]["run"].endswith(", ZB-H1"), bubble_rows[1]
    assert agrees(prediction[0]["predicted"], pipelined[2]["step_s"]), prediction[0]
    assert agrees(prediction[1]["predicted"], plan["step_s"]), (prediction[1], plan)
    print(f"ZB-H1: report theory {bubble_rows[1]['theory']} against 1F1B's {bubble_rows[0]['theory']}, "
          f"measured {bubble_rows[1]['measured']} against {bubble_rows[0]['measured']}; predicted with the schedule")


def check_screenshot(report_dir):
    """The page as a browser renders it: text and tables (dark ink) and bars (colour)."""
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if browser is None:
        print("screenshot: SKIPPED, no headless browser (bash scripts/setup.sh installs chromium-headless-shell)")
        return
    png = f"{report_dir}/report.png"
    subprocess.run([browser, "--no-sandbox", "--disable-gpu", f"--screenshot={png}", "--window-size=1200,2600",
                    f"file://{report_dir}/report.html"], check=True, capture_output=True, timeout=120)
    from PIL import Image  # python3-pil
    pixels = list(Image.open(png).convert("RGB").getdata())
    ink = sum(1 for r, g, b in pixels if max(r, g, b) < 100) / len(pixels)
    colour = sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 60) / len(pixels)
    # Measured on a rendered report: about 2% ink (text, rules) and 4% colour (bars).
    assert 0.002 < ink < 0.2 and colour > 0.005, f"screenshot ink {ink:.4f}, colour {colour:.4f}"
    print(f"screenshot: {png}, ink {ink:.3f}, colour {colour:.3f} of the page")


def check_bubble_metric(runs):
    """bubble_fraction on every line of a pipelined run, in (0, 1): a
    pipeline rank always waits for its first neighbour's data and always
    computes; on no line of the others."""
    for (path, lines, _) in runs:
        pipelined = lines[0]["pipeline"] > 1
        for m in lines:
            where = f"{os.path.basename(path)} step {m['step']}"
            if pipelined:
                assert "bubble_fraction" in m, f"{where}: no bubble_fraction under pipeline parallelism"
                assert 0 < m["bubble_fraction"] < 1, f"{where}: bubble_fraction {m['bubble_fraction']}"
            else:
                assert "bubble_fraction" not in m, f"{where}: bubble_fraction without a pipeline"
    print("bubble_fraction: on every step of the pipelined run, in (0, 1); absent from the others")


def main():
    tetra = os.path.abspath(sys.argv[1])
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
    with tempfile.TemporaryDirectory() as out:
        measured = cpu_runs.measure(tetra, out, mpiexec, repeats=1)
        runs = []
        for ranks, sets in cpu_runs.LAYOUTS.items():
            plan = cpu_runs.predict(tetra, cpu_runs.CLUSTER, ranks, sets, cpu_runs.layout_of(sets, ranks))
            runs.append((f"{out}/w{ranks}_0.jsonl", measured[ranks][0], plan))
        check_bubble_metric(runs)
        check_report(tetra, out, cpu_runs.CLUSTER, runs)
        pipelined = [run for run in runs if run[1][0]["pipeline"] > 1]
        check_zero_bubble_report(tetra, out, cpu_runs.CLUSTER, mpiexec, pipelined[0])


if __name__ == "__main__":
    main()
