#!/usr/bin/env python3
"""A rank with far more work than the others is named as the straggler.

Runs a tiny model as a 3-stage pipeline under mpirun with
parallel.pipeline_layers 1,14,1: rank 1, the middle stage, computes 14 layers
per micro-batch, ranks 0 and 2 one each (with the embedding and the LM head
of a 32-token vocabulary), so rank 1's compute is several times the median
rank's (3.4 to 5 on two busy cores). No timing is assumed beyond "14 layers
take more than 1.3 times 1", and even that only on most steps, so a busy
machine cannot fail it. Checks:

1. the metrics name rank 1 as slowest_rank with straggler_ratio above the
   threshold on at least 3/4 of the steps after the first, and carry both
   fields on every line;
2. the progress stream names rank 1 and this host, with a hint, and its
   warnings are exactly those the rule gives for the metrics' own values: one
   per run of log.straggler_steps consecutive steps with the same slowest
   rank above log.straggler_threshold, at the step that completes the run;
3. `tetra report` reads the file and its "Slowest rank" table names rank 1.

usage: check_straggler.py TETRA_BINARY [MPIEXEC]
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

SLOW_RANK = 1
THRESHOLD = 1.3  # log.straggler_threshold's default
RUN = 3  # log.straggler_steps
STEPS = 12


def expected_warnings(lines):
    """(step, rank) of each warning the consecutive-steps rule gives for `lines`."""
    warnings, rank, run = [], -1, 0
    for m in lines:
        if not m["straggler_ratio"] > THRESHOLD:
            rank, run = -1, 0
            continue
        if m["slowest_rank"] != rank:
            rank, run = m["slowest_rank"], 0
        run += 1
        if run == RUN:
            warnings.append((m["step"], rank))
    return warnings


def main():
    tetra = sys.argv[1]
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    config = os.path.join(os.path.dirname(__file__), "../../configs/tiny_dense.textproto")
    with tempfile.TemporaryDirectory() as out:
        metrics = f"{out}/metrics.jsonl"
        # Layers of some milliseconds, so that a rank descheduled on a busy
        # machine for a time slice does not look as slow as 14 layers.
        sets = ["model.num_hidden_layers=16", "model.hidden_size=128", "model.intermediate_size=352",
                "parallel.pipeline=3", "parallel.pipeline_layers=1,14,1", f"train.steps={STEPS}",
                "optimizer.warmup_steps=0", "train.global_batch_size=16", "train.micro_batch_size=4",
                "train.seq_length=64", f"log.straggler_steps={RUN}", f"log.metrics_path={metrics}"]
        command = [mpiexec, "--oversubscribe", "-np", "3", tetra, "train", "--config", config]
        for s in sets:
            command += ["--set", s]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        with open(metrics) as f:
            lines = [json.loads(line) for line in f]
        assert [m["step"] for m in lines] == list(range(1, STEPS + 1)), lines
        for m in lines:
            assert 0 <= m["slowest_rank"] < 3 and m["straggler_ratio"] >= 1, m
        named = [m for m in lines[1:] if m["slowest_rank"] == SLOW_RANK and m["straggler_ratio"] > THRESHOLD]
        assert len(named) * 4 >= 3 * (STEPS - 1), [(m["slowest_rank"], m["straggler_ratio"]) for m in lines]

        progress = run.stdout + run.stderr
        found = re.findall(r"tetra: warning: rank (\d+) \(host ([^)]*)\) is a straggler: its compute took "
                           r"at least ([\d.]+)x the median rank's in each of the last (\d+) steps", progress)
        expected = expected_warnings(lines)
        assert [int(rank) for rank, _, _, _ in found] == [rank for _, rank in expected], (found, expected)
        assert any(int(rank) == SLOW_RANK for rank, _, _, _ in found), progress
        host = socket.gethostname()[:63]
        for rank, name, ratio, steps in found:
            assert name == host and float(ratio) > THRESHOLD and int(steps) == RUN, (name, host, ratio, steps)
        assert progress.count("hint: check that host's GPU") == len(found), progress

        subprocess.run([tetra, "report", "--out", f"{out}/report", metrics], check=True, stdout=subprocess.DEVNULL)
        with open(f"{out}/report/report.md") as f:
            report = f.read()
        row = re.search(r"## Slowest rank\n\n\|.*\n\|.*\n\| [^|]+ \| (\d+) \| (\d+) of (\d+) \|", report)
        assert row and int(row.group(1)) == SLOW_RANK and int(row.group(3)) == STEPS - 1, report
        print(f"rank {SLOW_RANK} slowest above {THRESHOLD}x on {len(named)} of {STEPS - 1} steps; "
              f"{len(found)} warning(s) naming it on {host}, as the rule gives; the report names it")


if __name__ == "__main__":
    main()
