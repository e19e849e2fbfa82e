#!/usr/bin/python3
"""Measured pipeline bubble of every schedule against its table's, on a balanced CPU run.

An 8-layer model whose embedding and LM head are cheap next to a decoder layer
(vocab 64, hidden 128), so the stages take about equal time, as the tables'
cost model assumes; 8 micro-batches per step, pipeline 2 and 4. The trainer's
`bubble_fraction` is the time each rank waited on its pipeline neighbours
over the step time (mean over ranks). Prints, for 1F1B, interleaved 1F1B
(2 chunks), ZB-H1 and DualPipeV (2 chunks in a V), run round robin 3 times,
the least of the runs' median bubbles over steps 3..N (the first steps warm
caches and allocators; other jobs on the machine only add waiting) and the
median step time, next to the table's bubble as
`tetra plan` states it (simulated with F = 1, B = 2, or B = W = 1 where the
backward is split, and the formula). On a quiet machine with a core per
rank they agree within a few points; other jobs on the cores (or more ranks
than cores: pipeline 4 on a 2-core machine) add waiting the tables do not
count. (The test suite checks the executor's bubble without clocks:
tests/pipeline/executor_mpi_test.cc replays what each rank did under the
table's cost model.)
usage: tools/bench/bench_bubble.py [TETRA_BINARY]   (default build/tetra)
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TETRA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tetra")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")
MICRO_BATCHES, STEPS, RUNS = 8, 40, 3
MODEL = ["model.vocab_size=64", "model.hidden_size=128", "model.num_hidden_layers=8",
         "model.num_attention_heads=4", "model.intermediate_size=384", "train.seq_length=128",
         "train.micro_batch_size=2", f"train.global_batch_size={2 * MICRO_BATCHES}",
         f"train.steps={STEPS}", "train.threads=1", "log.interval=1000"]
SCHEDULES = [("1F1B", []),
             ("interleaved 1F1B v=2", ["parallel.virtual_stages=2"]),
             ("ZB-H1", ["parallel.schedule=ZB_H1"]),
             ("DualPipeV", ["parallel.schedule=DUALPIPE_V", "parallel.virtual_stages=2"])]


def sets(pairs):
    return [arg for s in pairs for arg in ("--set", s)]


def measured(tmp, name, pp, extra, run):
    """(bubble fraction, step seconds) of one run: medians over its steps 3..N."""
    metrics = os.path.join(tmp, f"{name}_{pp}_{run}.jsonl".replace(" ", "_"))
    cmd = ["mpirun", "--oversubscribe", "-np", str(pp), TETRA, "train", "--config", "/dev/null"]
    cmd += sets(MODEL + [f"parallel.pipeline={pp}", f"log.metrics_path={metrics}"] + extra)
    subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        steps = [json.loads(line) for line in f][2:]
    return statistics.median(s["bubble_fraction"] for s in steps), statistics.median(s["step_time_s"] for s in steps)


def table_bubble(pp, extra):
    """The simulated bubble and the formula's, as `tetra plan` prints them."""
    cmd = [TETRA, "plan", "--world", str(pp), "--config", "/dev/null"] + sets(MODEL + [f"parallel.pipeline={pp}"] + extra)
    text = subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True).stdout
    found = re.search(r"bubble ([0-9.]+)% simulated, (\S+) = ([0-9.]+)%", text)
    return float(found.group(1)) / 100, found.group(2)


with tempfile.TemporaryDirectory() as tmp:
    cases = [(pp, name, extra) for pp in (2, 4) for name, extra in SCHEDULES]
    # Round robin, so a busy spell of the machine falls on every schedule alike.
    runs = {case[:2]: [] for case in cases}
    for run in range(RUNS):
        for pp, name, extra in cases:
            runs[(pp, name)].append(measured(tmp, name, pp, extra, run))
    print(f"{MICRO_BATCHES} micro-batches; per run the median of steps 3..{STEPS}; of {RUNS} runs the least "
          "bubble (other jobs only add waiting) and the median step time")
    print(f"{'pipeline':>8}  {'schedule':22}{'measured':>10}{'table':>10}{'step s':>9}  formula")
    for pp, name, extra in cases:
        table, formula = table_bubble(pp, extra)
        bubble = min(b for b, _ in runs[(pp, name)])
        step = statistics.median(t for _, t in runs[(pp, name)])
        print(f"{pp:>8}  {name:22}{bubble:10.3f}{table:10.3f}{step:9.3f}  {formula}")
