#!/usr/bin/env python3
"""`tetra report`'s page as a person sees it (issue 31): runs the report on
the committed metrics of four short runs and opens report.html in headless
Chromium (Debian's chromium-headless-shell), which lays the page out and
reads back, by a probe script added to a copy of the page, the text it
renders (innerText), each table's cells and each chart's text boxes.

The runs (report_fixtures/, as `tetra train` wrote them on 2 CPU cores):
configs/tiny_dense.textproto with train.steps=6 train.micro_batch_size=4
log.interval=1 under `mpirun --oversubscribe -np N`, N = 1 (w1.jsonl); 2 with
train.global_batch_size=32 (w2, weak scaling); 4 with parallel.tensor=2 (w4);
8 with parallel.tensor=2 parallel.pipeline=2 (w8, a pipeline bubble).

It checks:

- no raw float anywhere a person reads (the page, report.md, the console):
  no exponent ("2.9681e-05", "2.41e+05"), no run of 4 or more decimals
  ("0.00386408"), no whole number of 4 or more digits without separators;
- times carry a unit (s, ms, us, ns) at three significant digits, tokens/s
  have thousands separators, efficiency and the bubble are percentages, and
  each agrees with the metrics files to the digits it shows;
- counts have their noun's number: "1 rank", never "1 ranks";
- every chart's axis ticks start at 0 and step by 1, 2 or 5 times a power of
  ten, the same unit on each label ("ms", "%"), the axis reaching the tallest
  bar; no text box leaves its chart or overlaps another.

Without a headless browser it checks the console and report.md and exits 77
(ctest: skipped).
usage: check_report_page.py TETRA_BINARY
"""
import glob
import html
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "tools", "report_fixtures", "*.jsonl")))
CONFIG = os.path.join(ROOT, "configs", "tiny_dense.textproto")
CLUSTER = os.path.join(ROOT, "configs", "clusters", "cpu_2core.textproto")

# Added to a copy of the page: what Chromium rendered, as JSON in <pre id="probe">.
PROBE = """<script>
const box = (e, origin) => { const r = e.getBoundingClientRect();
  return {left: r.left - origin.left, top: r.top - origin.top, right: r.right - origin.left,
          bottom: r.bottom - origin.top}; };
const page = {seen: document.body.innerText, tables: [], charts: []};
for (const table of document.querySelectorAll('table')) {
  const rows = [...table.rows].map(row => [...row.cells].map(cell => cell.innerText.trim()));
  page.tables.push({title: table.previousElementSibling.innerText, header: rows[0], rows: rows.slice(1)});
}
for (const svg of document.querySelectorAll('svg')) {
  const origin = svg.getBoundingClientRect();
  page.charts.push({
    title: svg.querySelector('title').textContent, width: origin.width, height: origin.height,
    texts: [...svg.querySelectorAll('text')].map(t => ({anchor: t.getAttribute('text-anchor'), text: t.textContent,
                                                       ...box(t, origin)})),
    gridlines: [...svg.querySelectorAll('line')].map(l => box(l, origin)),
    bars: [...svg.querySelectorAll('rect')].filter(r => r.querySelector('title')).map(r => box(r, origin)),
  });
}
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = JSON.stringify(page);
document.body.appendChild(pre);
</script>
"""

# What no person-made report shows.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?|\bnan\b|\binf\b")


def raw(number):
    """An exponent, 4 or more decimals, or 4 or more digits without separators."""
    whole, _, decimals = number.partition(".")
    return not number[0].isdigit() or "e" in number.lower() or len(decimals) >= 4 or \
        re.search(r"\d{4}", whole) is not None


TIME = re.compile(r"^(-?[\d,]+(?:\.\d+)?) (s|ms|us|ns)$")
SECONDS = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def raw_floats(text):
    # File names (w1.jsonl) and the report's path are not numbers a person reads.
    text = re.sub(r"\S+\.jsonl\b", "", text)
    return [m.group(0) for m in NUMBER.finditer(text) if raw(m.group(0))]


def significant_digits(number_text):
    digits = number_text.replace(",", "").replace("-", "").replace(".", "").lstrip("0")
    return len(digits)


def duration(cell):
    """(seconds, the size of the last digit shown in seconds) of a "3.86 ms"
    cell, checked to show three significant digits in the unit that keeps
    the number from 1 to 999."""
    m = TIME.match(cell)
    assert m, f"{cell!r} is not a time with a unit"
    number, unit = m.groups()
    value = float(number.replace(",", ""))
    assert value == 0 or significant_digits(number) == 3 or (unit == "s" and value >= 1000), cell
    assert value == 0 or 1 <= abs(value) < 1000 or unit in ("s", "ns"), f"{cell!r}: the wrong unit"
    decimals = len(number.split(".")[1]) if "." in number else 0
    if value == 0:
        return 0.0, 0.0  # "0 s" is shown for exactly 0 only
    return value * SECONDS[unit], SECONDS[unit] * 10.0 ** -decimals


def quantity(cell):
    assert re.fullmatch(r"\d{1,3}(,\d{3})*|\d{1,2}\.\d+", cell), f"{cell!r}: no thousands separators"
    return float(cell.replace(",", ""))


def percent(cell):
    assert re.fullmatch(r"-?\d+\.\d%", cell), f"{cell!r} is not a percentage"
    return float(cell[:-1]) / 100


def agrees(shown, exact, last_digit):
    """`shown` is `exact` rounded to a last digit of `last_digit`."""
    return abs(shown - exact) <= last_digit / 2 * (1 + 1e-9) + 1e-15


def check_text(where, text):
    floats = raw_floats(text)
    plurals = sorted(set(re.findall(r"\b1 (?:rank|run|step)s\b", text)))
    assert not floats and not plurals, f"{where} shows raw numbers {floats} and plurals of one {plurals}"


def render(report_dir, browser):
    with open(f"{report_dir}/report.html") as f:
        page = f.read()
    assert "<script" not in page, "the report has a script of its own"
    probe = f"{report_dir}/probe.html"
    with open(probe, "w") as f:
        f.write(page.replace("</body>", PROBE + "</body>"))
    dom = subprocess.run([browser, "--no-sandbox", "--disable-gpu", "--window-size=1200,2600", "--dump-dom",
                          f"file://{probe}"], check=True, capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, "Chromium ran no probe: " + dom[-500:]
    return json.loads(html.unescape(m.group(1)))


def medians(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    steps = lines[1:] or lines
    return lines[0], lambda key: statistics.median(m.get(key, 0) for m in steps), steps


def check_tables(tables):
    by_title = {t["title"]: t for t in tables}
    scaling = by_title["Throughput and scaling"]
    breakdown = by_title["Time breakdown of the median step"]
    assert len(scaling["rows"]) == len(FIXTURES) == len(breakdown["rows"]), by_title.keys()
    base = None
    for path, cells, parts in zip(FIXTURES, scaling["rows"], breakdown["rows"]):
        row, part = dict(zip(scaling["header"], cells)), dict(zip(breakdown["header"], parts))
        first, median, steps = medians(path)
        world = first["world_size"]
        assert row["run"].startswith(f"{world} rank{'s' if world > 1 else ''}: "), row
        assert row["file"] == os.path.basename(path), row
        compute = max(0, median("fwd_s") + median("bwd_s") - median("comm_exposed_s_tp"))
        for cell, exact in ((row["step time (median)"], median("step_time_s")),
                            (row["step time (best)"], min(m["step_time_s"] for m in steps)),
                            (part["compute"], compute), (part["tp comm"], median("comm_exposed_s_tp")),
                            (part["dp comm"], median("comm_exposed_s_dp")),
                            (part["pp wait"], median("comm_exposed_s_pp")),
                            (part["optimizer"], median("optimizer_s"))):
            shown, last = duration(cell)
            assert agrees(shown, exact, last), (path, cell, exact)
        for column in breakdown["header"][1:]:
            duration(part[column])
        tokens = median("tokens_per_s")
        assert agrees(quantity(row["tokens/s (median)"]), tokens, 1 if tokens >= 100 else 0.1), row
        base = base or (tokens, world)
        assert agrees(percent(row["scaling efficiency"]), (tokens / world) / (base[0] / base[1]), 1e-3), row
    predicted = by_title["Measured and predicted step time"]
    for cells in predicted["rows"]:
        row = dict(zip(predicted["header"], cells))
        for column in ("measured (best)", "measured (median)", "predicted"):
            duration(row[column])
        assert re.fullmatch(r"[+-]\d+\.\d%", row["error vs best"]), row
    bubble = by_title["Pipeline bubble"]
    pipelined = [p for p in FIXTURES if medians(p)[0]["pipeline"] > 1]
    assert len(bubble["rows"]) == len(pipelined) == 1, bubble
    for path, cells in zip(pipelined, bubble["rows"]):
        row = dict(zip(bubble["header"], cells))
        first, median, _ = medians(path)
        m, p = first["global_batch_size"] // (first["micro_batch_size"] * first["data"]), first["pipeline"]
        assert agrees(percent(row["theory"]), (p - 1) / (m + p - 1), 1e-3), row
        assert agrees(percent(row["measured"]), median("bubble_fraction"), 1e-3), row
    return len(tables)


def tick_values(labels):
    """The ticks' numbers and their one unit; the step is 1, 2 or 5 times a power of ten."""
    parsed = [re.fullmatch(r"(-?[\d,]+(?:\.\d+)?)\s*(%|s|ms|us|ns|)", label) for label in labels]
    assert all(parsed), f"ticks {labels}"
    units = {m.group(2) for m in parsed}
    assert len(units) == 1, f"ticks {labels} mix units"
    values = [float(m.group(1).replace(",", "")) for m in parsed]
    step = values[1] - values[0]
    assert values[0] == 0 and step > 0, labels
    assert all(abs(b - a - step) <= 1e-9 * step for a, b in zip(values, values[1:])), labels
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert round(mantissa, 6) in (1, 2, 5), f"ticks {labels} step by {step}"
    return values, units.pop()


def overlaps(a, b):
    return a["left"] < b["right"] - 0.5 and b["left"] < a["right"] - 0.5 and \
        a["top"] < b["bottom"] - 0.5 and b["top"] < a["bottom"] - 0.5


def check_charts(charts):
    want_units = {"Throughput": "", "Scaling efficiency against the smallest run": "%",
                  "Where the median step's time went": "time", "Measured and predicted step time": "time",
                  "Pipeline bubble": "%"}
    assert sorted(c["title"] for c in charts) == sorted(want_units), [c["title"] for c in charts]
    for chart in charts:
        ticks = [t for t in chart["texts"] if t["anchor"] == "end"]  # the axis's labels
        values, unit = tick_values([t["text"] for t in ticks])
        want = want_units[chart["title"]]
        assert unit == want or (want == "time" and unit in SECONDS), (chart["title"], unit)
        # The top tick's gridline reaches over every bar.
        top = min(line["top"] for line in chart["gridlines"])
        assert chart["bars"] and all(bar["top"] >= top - 0.5 for bar in chart["bars"]), chart["title"]
        texts = chart["texts"]
        for t in texts:
            assert t["left"] >= 0 and t["top"] >= 0 and t["right"] <= chart["width"] and \
                t["bottom"] <= chart["height"], (chart["title"], t)
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                assert not overlaps(a, b), (chart["title"], a, b)
        print(f"chart {chart['title']!r}: ticks {', '.join(t['text'] for t in ticks)}")
    return len(charts)


def checked(failures, what, check, *args):
    """Runs one check, keeping its failure so that every check reports."""
    try:
        return check(*args)
    except (AssertionError, KeyError) as e:
        failures.append(f"{what}: {e}")
        print(f"FAILED {what}: {e}")
        return 0


def check_console(console):
    check_text("the console", console)
    assert f"report on {len(FIXTURES)} runs" in console and "  1 rank: " in console, console


def check_page_text(seen):
    check_text("the page", seen)
    assert "1 rank: tp 1 x pp 1 x dp 1" in seen, seen[:400]


def main():
    tetra = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as out:
        console = subprocess.run([tetra, "report", "--out", out, "--config", CONFIG, "--cluster", CLUSTER] + FIXTURES,
                                 check=True, capture_output=True, text=True).stdout
        checked(failures, "console", check_console, console.replace(out, "DIR"))
        with open(f"{out}/report.md") as f:
            checked(failures, "report.md", check_text, "report.md", f.read())
        browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
        if browser is None:
            print("page: SKIPPED, no headless browser (bash scripts/setup.sh installs chromium-headless-shell)")
            sys.exit(f"{len(failures)} check(s) failed" if failures else 77)  # 77: ctest's SKIP_RETURN_CODE
        page = render(out, browser)
    checked(failures, "page text", check_page_text, page["seen"])
    tables = checked(failures, "tables", check_tables, page["tables"])
    charts = checked(failures, "charts", check_charts, page["charts"])
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print(f"report page: {tables} tables and {charts} charts as Chromium renders them; "
          "no raw floats, units on times and ticks, 1-2-5 axes, no text outside its chart or overlapping")


if __name__ == "__main__":
    main()
