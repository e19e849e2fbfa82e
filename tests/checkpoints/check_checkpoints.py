#!/usr/bin/python3
"""Checkpoints under mpirun: exact resume on the same layout, resharding to others.

Trains a tiny Llama (GQA, untied head) for 20 steps with a checkpoint at step
10, removes the step-20 checkpoint and resumes from step 10, and checks:
  - same layout (tensor 2 x data 2 ZeRO-1; pipeline 2 x data 2 ZeRO-1): the
    resumed steps 11..20 equal the uninterrupted run of that layout bit for bit,
  - another layout (saved under tensor 2 x data 2 ZeRO-1, resumed under
    pipeline 2 x data 2 ZeRO-1, under one rank and under data 4 ZeRO-0; saved
    under data 4 ZeRO-1, resumed under tensor 2 x data 2 ZeRO-0): steps 11..20
    within 1e-5 relative of the uninterrupted single-rank run,
  - SIGTERM to mpirun during a long data 2 ZeRO-1 run: every rank finishes the
    same step and saves it; the checkpoint verifies with `tetra checkpoint inspect`.
usage: check_checkpoints.py TETRA_BINARY
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TETRA = sys.argv[1]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")
MODEL = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=2",
         "model.num_attention_heads=4", "model.num_key_value_heads=2",
         "model.intermediate_size=64", "train.global_batch_size=8", "train.micro_batch_size=2",
         "train.seq_length=16", "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2",
         "data.synthetic.order=1", "log.interval=1000", "train.steps=20",
         "checkpoint.interval=10"]
# Tolerance (relative) of a resharded resume against the single-rank run: the
# layouts sum the same float terms in other orders (split GEMMs, all-reduces),
# a round-off of ~1e-7 per step that 20 steps of AdamW let grow a little (as
# tests/layouts/check_layouts.py). The same layout must match exactly.
RESHARD_RTOL = 1e-5
LAYOUTS = {
    "single": (1, []),
    "tp2_dp2_zero1": (4, ["parallel.tensor=2", "optimizer.zero_stage=1"]),
    "pp2_dp2_zero1": (4, ["parallel.pipeline=2", "optimizer.zero_stage=1"]),
    "dp4_zero0": (4, []),
    "dp4_zero1": (4, ["optimizer.zero_stage=1"]),
    "tp2_dp2_zero0": (4, ["parallel.tensor=2"]),
}
failures = []


def train(work, layout, ckpt, name):
    ranks, sets = LAYOUTS[layout]
    cmd = [TETRA, "train", "--config", "/dev/null"]
    for s in MODEL + sets + [f"log.metrics_path={work}/{name}.jsonl", f"checkpoint.dir={ckpt}"]:
        cmd += ["--set", s]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return {m["step"]: m["loss"] for m in map(json.loads, open(f"{work}/{name}.jsonl"))}


def saved_at_10(work, layout):
    """The uninterrupted run of `layout` and a checkpoint dir holding only its step 10."""
    ckpt = f"{work}/{layout}_ckpt"
    losses = train(work, layout, ckpt, f"{layout}_full")
    shutil.rmtree(f"{ckpt}/step_00000020")
    return losses, ckpt


def resume(work, layout, ckpt, name):
    copy = f"{work}/{name}_ckpt"
    shutil.copytree(ckpt, copy)
    losses = train(work, layout, copy, name)
    if sorted(losses) != list(range(11, 21)):
        failures.append(f"{name}: resumed steps {sorted(losses)}, expected 11..20")
    return losses


def check(name, resumed, reference, rtol):
    worst = max(abs(resumed[s] - reference[s]) / abs(reference[s]) for s in resumed)
    print(f"{name}: steps 11..20, max relative loss difference {worst:.3g} (limit {rtol:g})")
    if worst > rtol:
        failures.append(f"{name}: {worst:.3g} > {rtol:g}")


def stop_with_sigterm(work):
    """A long 2-rank run, SIGTERM to mpirun once steps are running."""
    ckpt, metrics = f"{work}/sigterm_ckpt", f"{work}/sigterm.jsonl"
    cmd = ["mpirun", "--oversubscribe", "-np", "2", TETRA, "train", "--config", "/dev/null"]
    for s in MODEL + ["optimizer.zero_stage=1", "train.steps=20000", "checkpoint.interval=0",
                      f"log.metrics_path={metrics}", f"checkpoint.dir={ckpt}"]:
        cmd += ["--set", s]
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not os.path.exists(metrics) or
                                      sum(1 for _ in open(metrics)) < 3):
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=120)
    stopped = re.search(r"stopped by SIGTERM after step (\d+)", out)
    if not stopped:
        failures.append(f"SIGTERM: no clean stop in\n{out}")
        return
    step = int(stopped.group(1))
    steps = os.listdir(ckpt)
    inspect = subprocess.run([TETRA, "checkpoint", "inspect", ckpt], capture_output=True, text=True)
    print(f"SIGTERM to mpirun: stopped after step {step}, saved {steps}")
    if steps != [f"step_{step:08d}"] or inspect.returncode != 0 or \
            "written by 2 ranks" not in inspect.stdout:
        failures.append(f"SIGTERM: saved {steps} for step {step}; inspect:\n{inspect.stdout}{inspect.stderr}")


with tempfile.TemporaryDirectory() as work:
    stop_with_sigterm(work)
    single, _ = saved_at_10(work, "single")
    for layout in ["tp2_dp2_zero1", "pp2_dp2_zero1"]:
        full, ckpt = saved_at_10(work, layout)
        check(f"{layout} -> {layout}", resume(work, layout, ckpt, f"{layout}_same"), full, 0.0)
        if layout == "tp2_dp2_zero1":
            for target in ["pp2_dp2_zero1", "single", "dp4_zero0"]:
                name = f"{layout}_to_{target}"
                check(f"{layout} -> {target}", resume(work, target, ckpt, name), single, RESHARD_RTOL)
    _, ckpt = saved_at_10(work, "dp4_zero1")
    check("dp4_zero1 -> tp2_dp2_zero0", resume(work, "tp2_dp2_zero0", ckpt, "dp4_to_tp2"), single,
          RESHARD_RTOL)

if failures:
    sys.exit("FAIL:\n  " + "\n  ".join(failures))
print("PASS")
