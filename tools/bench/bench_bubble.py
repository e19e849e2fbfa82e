#!/usr/bin/python3
"""Measured pipeline bubble against the schedule table's, on a balanced CPU run.

Two pipeline ranks, each holding half of an 8-layer model whose embedding and
LM head are cheap next to a decoder layer (vocab 64, hidden 128), so the two
stages take about equal time, as the table's formula assumes; 8 micro-batches
per step. The trainer's `bubble_fraction` is the time each rank waited on its
pipeline neighbours over the step time (mean over ranks); the table's value
with equal stage times is (p - 1) / (v m + p - 1) (DESIGN.md, "Tests").
Prints, for 1F1B (v = 1) and interleaved 1F1B (v = 2), the median over steps
3..N (the first steps warm caches and allocators) next to the table's value.
On a quiet machine with a core per rank they agree within about 0.05 and
interleaving lowers the bubble; other jobs on the cores add waiting the table
does not count. (The test suite checks the executor's bubble without clocks:
tests/pipeline/executor_mpi_test.cc replays what each rank did under the
table's cost model.)
usage: tools/bench/bench_bubble.py [TETRA_BINARY]   (default build/tetra)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TETRA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tetra")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")
PP, MICRO_BATCHES, STEPS = 2, 8, 14
MODEL = ["model.vocab_size=64", "model.hidden_size=128", "model.num_hidden_layers=8",
         "model.num_attention_heads=4", "model.intermediate_size=384", "train.seq_length=64",
         "train.micro_batch_size=2", f"train.global_batch_size={2 * MICRO_BATCHES}",
         f"train.steps={STEPS}", "train.threads=1", f"parallel.pipeline={PP}", "log.interval=1000"]


def measured_bubble(tmp, virtual_stages):
    metrics = os.path.join(tmp, f"v{virtual_stages}.jsonl")
    cmd = ["mpirun", "--oversubscribe", "-np", str(PP), TETRA, "train", "--config", "/dev/null"]
    for s in MODEL + [f"parallel.virtual_stages={virtual_stages}", f"log.metrics_path={metrics}"]:
        cmd += ["--set", s]
    subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        steps = [json.loads(line) for line in f]
    return statistics.median(s["bubble_fraction"] for s in steps[2:])


with tempfile.TemporaryDirectory() as tmp:
    print(f"pipeline {PP}, {MICRO_BATCHES} micro-batches, median of steps 3..{STEPS}")
    print(f"{'schedule':22}{'measured':>10}{'table':>10}")
    for v in (1, 2):
        table = (PP - 1) / (v * MICRO_BATCHES + PP - 1)
        name = "1F1B" if v == 1 else f"interleaved 1F1B v={v}"
        print(f"{name:22}{measured_bubble(tmp, v):10.3f}{table:10.3f}")
