#!/usr/bin/python3
"""Measured pipeline bubble against the schedule table's, on a balanced CPU run.

Two pipeline ranks, each holding half of an 8-layer model whose embedding and
LM head are cheap next to a decoder layer (vocab 64, hidden 128), so the two
stages take equal time, as the table's formula assumes; 8 micro-batches per
step. The trainer's `bubble_fraction` is the time each rank waited on its
pipeline neighbours over the step time (mean over ranks); the table's value
with equal stage times is (p - 1) / (v m + p - 1) (DESIGN.md, "Tests").
Checks, on the median of steps 3..N (the first steps warm caches and
allocators):
  - 1F1B (v = 1) and interleaved 1F1B (v = 2) each within 0.05 of the table,
  - interleaving lowers the measured bubble.
The two ranks need a core each: run it alone (ctest RUN_SERIAL).
usage: check_bubble.py TETRA_BINARY
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

TETRA = sys.argv[1]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")
PP, MICRO_BATCHES, STEPS = 2, 8, 14
MODEL = ["model.vocab_size=64", "model.hidden_size=128", "model.num_hidden_layers=8",
         "model.num_attention_heads=4", "model.intermediate_size=384", "train.seq_length=64",
         "train.micro_batch_size=2", f"train.global_batch_size={2 * MICRO_BATCHES}",
         f"train.steps={STEPS}", "train.threads=1", f"parallel.pipeline={PP}", "log.interval=1000"]
# Allowed distance from the table: messages, imbalance and the scheduler's
# noise add waiting the table does not count (the bound).
TOLERANCE = 0.05


def measured_bubble(tmp, virtual_stages):
    metrics = os.path.join(tmp, f"v{virtual_stages}.jsonl")
    cmd = ["mpirun", "--oversubscribe", "-np", str(PP), TETRA, "train", "--config", "/dev/null"]
    for s in MODEL + [f"parallel.virtual_stages={virtual_stages}", f"log.metrics_path={metrics}"]:
        cmd += ["--set", s]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    steps = [json.loads(line) for line in open(metrics)]
    return statistics.median(s["bubble_fraction"] for s in steps[2:])


failures = []
with tempfile.TemporaryDirectory() as tmp:
    measured = {}
    for v in (1, 2):
        table = (PP - 1) / (v * MICRO_BATCHES + PP - 1)
        measured[v] = measured_bubble(tmp, v)
        ok = abs(measured[v] - table) <= TOLERANCE
        print(f"{'ok  ' if ok else 'FAIL'} v={v}: measured bubble {measured[v]:.3f}, table {table:.3f}")
        if not ok:
            failures.append(v)
    lower = measured[2] < measured[1]
    print(f"{'ok  ' if lower else 'FAIL'} interleaving lowers the bubble: {measured[2]:.3f} < {measured[1]:.3f}")
if failures or not lower:
    sys.exit("the measured pipeline bubble does not match the schedule table")
