"""Runs of configs/bench_cpu_scaling.textproto on this machine's CPU cores
under mpirun --oversubscribe, shared by tools/bench/calibrate_cpu.py,
tools/bench/bench_cpu_scaling.py and tests/tools/check_scaling_report.py.

A layout's step time is the fastest step after the first (step 1 pays for
first touches and thread start) over `REPEATS` runs, the layouts taking turns
(1, 2, 4, 8, 1, 2, ...): on a machine shared with other jobs the fastest step
is the one least disturbed by them, the closest to what the model alone
costs, and taking turns keeps a burst of other work from landing on one
layout only.
"""
import json
import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(ROOT, "configs", "bench_cpu_scaling.textproto")
CLUSTER = os.path.join(ROOT, "configs", "clusters", "cpu_2core.textproto")
# world size -> --set overrides: data, data, tensor x data, tensor x pipeline x data.
LAYOUTS = {
    1: [],
    2: [],
    4: ["parallel.tensor=2"],
    8: ["parallel.tensor=2", "parallel.pipeline=2"],
}


def train(tetra, ranks, sets, metrics_path, mpiexec="mpirun"):
    """Runs `tetra train` on `ranks` ranks; returns the metrics lines."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [mpiexec, "--oversubscribe", "-np", str(ranks), tetra, "train", "--config", CONFIG,
               "--set", f"log.metrics_path={metrics_path}"]
    for s in sets:
        command += ["--set", s]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(metrics_path) as f:
        return [json.loads(line) for line in f]


REPEATS = 2


def measure(tetra, out, mpiexec="mpirun", repeats=REPEATS):
    """{ranks: [metrics lines of each run]} for every layout, `repeats` runs
    each, taking turns; run r of `ranks` ranks writes out/w{ranks}_{r}.jsonl."""
    runs = {ranks: [] for ranks in LAYOUTS}
    for r in range(repeats):
        for ranks, sets in LAYOUTS.items():
            runs[ranks].append(train(tetra, ranks, sets, f"{out}/w{ranks}_{r}.jsonl", mpiexec))
    return runs


def fastest_step(runs):
    """The metrics line of the fastest step after the first of any of `runs`
    (each a list of metrics lines)."""
    return min((m for lines in runs for m in lines[1:]), key=lambda m: m["step_time_s"])


def predict(tetra, cluster, ranks, sets, layout):
    """The planner's prediction (a dict of `tetra plan --json`) for `layout`
    (tp, pp, dp) with the config's ZeRO stage and no recompute."""
    command = [tetra, "plan", "--config", CONFIG, "--cluster", cluster, "--world", str(ranks), "--json"]
    for s in sets:
        command += ["--set", s]
    plans = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)["layouts"]
    tp, pp, dp = layout
    for p in plans:
        if (p["tp"], p["pp"], p["dp"], p["ep"], p["zero_stage"], p["recompute"]) == (tp, pp, dp, 1, 0, "NONE"):
            return p
    raise LookupError(f"tetra plan lists no layout tp {tp} x pp {pp} x dp {dp}")


def layout_of(sets, ranks):
    values = dict(s.split("=") for s in sets)
    tp, pp = int(values.get("parallel.tensor", 1)), int(values.get("parallel.pipeline", 1))
    return tp, pp, ranks // (tp * pp)
