#!/usr/bin/python3
"""Checkpoints under mpirun: exact resume on the same layout, resharding to others.

Trains a tiny Llama (GQA, untied head) for 20 steps with a checkpoint at step
10, removes the step-20 checkpoint and resumes from step 10, and checks:
  - same layout (tensor 2 x data 2 ZeRO-1, also with train.precision BF16,
    whose compute copies must be made from the restored weights; pipeline 2 x
    data 2 ZeRO-1): the resumed steps 11..20 equal the uninterrupted run of
    that layout bit for bit,
  - another layout (saved under tensor 2 x data 2 ZeRO-1, resumed under
    pipeline 2 x data 2 ZeRO-1, under one rank and under data 4 ZeRO-0; saved
    under data 4 ZeRO-1, resumed under tensor 2 x data 2 ZeRO-0): steps 11..20
    within 1e-5 relative of the uninterrupted single-rank run; the tensor 2
    checkpoint restored on one rank without a step exports exactly what
    `tetra checkpoint export` writes of it (the padded vocabulary's padding
    neither saved nor restored),
  - SIGTERM to mpirun during a long data 2 ZeRO-1 run: every rank finishes the
    same step and saves it; the checkpoint verifies with `tetra checkpoint inspect`.
The same for a tiny DeepSeek-V3 MoE model (4 layers, the first dense, 8
routed experts top-2, one shared, bias balancing fast enough to move routing):
  - same layout (one rank; data 4 expert 2 ZeRO-1 and ZeRO-0; pipeline 2 x
    data 2 expert 2 with tied embeddings, also interleaved with 2 virtual
    stages): the resumed losses equal the uninterrupted run's text, and the
    tied embedding (held by both end stages) is saved once,
  - saved under data 4 expert 2 ZeRO-1, resumed under one rank, data 4
    (expert 1), data 4 expert 4 and tensor 2 x data 2 expert 2 ZeRO-0 (experts
    split over tp): within 1e-5 relative of the uninterrupted single-rank run,
  - a resume that runs no step (train.steps 10) under data 4 expert 4 exports,
    through export_path, exactly the tensors `tetra checkpoint export` writes
    of the step-10 checkpoint, correction biases included (listed by `tetra
    checkpoint inspect` as buffers); and `tetra checkpoint export` of the
    step-20 checkpoint equals the uninterrupted run's export_path.
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

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, read_safetensors, run_tetra  # noqa: E402

TETRA = sys.argv[1]
MODEL = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=2",
         "model.num_attention_heads=4", "model.num_key_value_heads=2",
         "model.intermediate_size=64", "train.global_batch_size=8", "train.micro_batch_size=2",
         "train.seq_length=16", "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2",
         "data.synthetic.order=1", "log.interval=1000", "train.steps=20",
         "checkpoint.interval=10"]
# The MoE model: the dense one with 4 layers, whose last 3 route (bias speed
# 0.01 so the correction biases change the choice within 20 steps).
MOE = [s for s in MODEL if not s.startswith("model.num_hidden_layers")] + [
    "model.num_hidden_layers=4", "model.moe.n_routed_experts=8", "model.moe.num_experts_per_tok=2",
    "model.moe.n_shared_experts=1", "model.moe.moe_intermediate_size=16",
    "model.moe.first_k_dense_replace=1", "model.moe.bias_update_speed=0.01"]
# Tolerance (relative) of a resharded resume against the single-rank run: the
# layouts sum the same float terms in other orders (split GEMMs, all-reduces),
# a round-off of ~1e-7 per step that 20 steps of AdamW let grow a little (as
# tests/layouts/check_layouts.py). The same layout must match exactly.
RESHARD_RTOL = 1e-5
LAYOUTS = {
    "single": (1, MODEL),
    "tp2_dp2_zero1": (4, MODEL + ["parallel.tensor=2", "optimizer.zero_stage=1"]),
    "tp2_dp2_zero1_bf16": (4, MODEL + ["parallel.tensor=2", "optimizer.zero_stage=1", "train.precision=BF16"]),
    "pp2_dp2_zero1": (4, MODEL + ["parallel.pipeline=2", "optimizer.zero_stage=1"]),
    "dp4_zero0": (4, MODEL),
    "dp4_zero1": (4, MODEL + ["optimizer.zero_stage=1"]),
    "tp2_dp2_zero0": (4, MODEL + ["parallel.tensor=2"]),
    "moe_single": (1, MOE),
    "moe_dp4_ep2_zero1": (4, MOE + ["parallel.expert=2", "optimizer.zero_stage=1"]),
    "moe_dp4_ep2_zero0": (4, MOE + ["parallel.expert=2"]),
    "moe_dp4_zero1": (4, MOE + ["optimizer.zero_stage=1"]),
    "moe_dp4_ep4_zero1": (4, MOE + ["parallel.expert=4", "optimizer.zero_stage=1"]),
    "moe_tp2_dp2_ep2_zero0": (4, MOE + ["parallel.tensor=2", "parallel.expert=2"]),
    "moe_pp2_dp2_ep2_tied": (4, MOE + ["parallel.pipeline=2", "parallel.expert=2",
                                       "optimizer.zero_stage=1", "model.tie_word_embeddings=true"]),
    "moe_pp2_vs2_dp2_ep2_tied": (4, MOE + ["parallel.pipeline=2", "parallel.virtual_stages=2",
                                           "parallel.expert=2", "optimizer.zero_stage=1",
                                           "model.tie_word_embeddings=true"]),
}
failures = []


def run(cmd, ranks=1):
    return run_tetra(cmd, ranks).stdout


def train(work, layout, ckpt, name, extra=()):
    ranks, sets = LAYOUTS[layout]
    cmd = [TETRA, "train", "--config", "/dev/null"]
    for s in sets + list(extra) + [f"log.metrics_path={work}/{name}.jsonl",
                                          f"checkpoint.dir={ckpt}"]:
        cmd += ["--set", s]
    run(cmd, ranks)
    return {m["step"]: m["loss"] for m in map(json.loads, open(f"{work}/{name}.jsonl"))}


def loss_texts(work, name):
    """Step -> the loss as the metrics file writes it (full round-trip precision)."""
    return dict(re.findall(r'"step": (\d+), "loss": ([^,]+),', open(f"{work}/{name}.jsonl").read()))


def saved_at_10(work, layout, extra=()):
    """The uninterrupted run of `layout` and a checkpoint dir holding only its step 10."""
    ckpt = f"{work}/{layout}_ckpt"
    losses = train(work, layout, ckpt, f"{layout}_full", extra)
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


def check_same_text(work, name, full, resumed):
    """Same layout: steps 11..20 of the resumed run write the uninterrupted run's loss text."""
    a, b = loss_texts(work, full), loss_texts(work, resumed)
    differ = [s for s in b if a.get(s) != b[s]]
    print(f"{name}: steps {min(b, key=int)}..{max(b, key=int)}, losses written identically "
          f"except at {differ or 'no step'}")
    if differ or sorted(map(int, b)) != list(range(11, 21)):
        failures.append(f"{name}: resumed steps {sorted(b, key=int)}; losses differ at {differ}: "
                        + ", ".join(f"{a.get(s)} vs {b[s]}" for s in differ[:3]))


def check_same_tensors(name, exported, reference, moe=True):
    """Two safetensors files hold the same tensors, bit for bit (an MoE model's
    correction biases among them, moved by balancing)."""
    a, b = read_safetensors(exported), read_safetensors(reference)
    differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    biases = sorted(n for n in a if n.endswith("e_score_correction_bias"))
    moved = sum(any(a[n][2]) for n in biases)  # biases with a nonzero byte: balancing moved them
    print(f"{name}: {len(a)} and {len(b)} tensors, {len(differ)} differ; {len(biases)} correction "
          f"biases, {moved} moved from 0")
    if differ or (moe and (not biases or moved != len(biases))):
        failures.append(f"{name}: tensors differ: {differ[:5]}; biases {biases}, {moved} moved")


def export_checkpoint(work, step_dir):
    """`tetra checkpoint export` of one step directory; returns the file."""
    ckpt, step = os.path.split(step_dir)
    out = f"{work}/{os.path.basename(ckpt)}_{step}"
    run([TETRA, "checkpoint", "export", step_dir, "--out", out])
    return f"{out}/model.safetensors"


def moe_checks(work):
    single, _ = saved_at_10(work, "moe_single")
    resume(work, "moe_single", f"{work}/moe_single_ckpt", "moe_single_same")
    check_same_text(work, "moe_single -> moe_single", "moe_single_full", "moe_single_same")
    # The uninterrupted ep 2 run exports its final weights; so does its step-20 checkpoint.
    layout = "moe_dp4_ep2_zero1"
    ckpt = f"{work}/{layout}_ckpt"
    train(work, layout, ckpt, f"{layout}_full", [f"export_path={work}/{layout}_export"])
    check_same_tensors(f"{layout}: checkpoint export of step 20 vs export_path",
                       export_checkpoint(work, f"{ckpt}/step_00000020"),
                       f"{work}/{layout}_export/model.safetensors")
    inspect = run([TETRA, "checkpoint", "inspect", ckpt])
    buffers = re.findall(r"^\s*buffer\s+(\S+)", inspect, re.M)
    print(f"{layout}: inspect lists buffers {buffers}")
    if buffers != [f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2, 3)]:
        failures.append(f"{layout}: inspect lists buffers {buffers}\n{inspect}")
    shutil.rmtree(f"{ckpt}/step_00000020")
    resume(work, layout, ckpt, f"{layout}_same")
    check_same_text(work, f"{layout} -> {layout}", f"{layout}_full", f"{layout}_same")
    for target in ["moe_single", "moe_dp4_zero1", "moe_dp4_ep4_zero1", "moe_tp2_dp2_ep2_zero0"]:
        name = f"{layout}_to_{target}"
        check(f"{layout} -> {target}", resume(work, target, ckpt, name), single, RESHARD_RTOL)
    # A resume that runs no step: the restored model, biases included, exactly as saved.
    copy = f"{work}/{layout}_restore_ckpt"
    shutil.copytree(ckpt, copy)
    train(work, "moe_dp4_ep4_zero1", copy, f"{layout}_restore",
          ["train.steps=10", f"export_path={work}/{layout}_restore_export"])
    check_same_tensors(f"{layout} -> moe_dp4_ep4_zero1 restored at step 10 vs checkpoint export",
                       f"{work}/{layout}_restore_export/model.safetensors",
                       export_checkpoint(work, f"{ckpt}/step_00000010"))
    for layout in ["moe_dp4_ep2_zero0", "moe_pp2_dp2_ep2_tied", "moe_pp2_vs2_dp2_ep2_tied"]:
        _, ckpt = saved_at_10(work, layout)
        if "tied" in layout:  # the last stage's embedding copy equals the first's: saved once
            inspect = run([TETRA, "checkpoint", "inspect", ckpt])
            embedding = re.findall(
                r"^\s*weight\s+model\.embed_tokens\.weight\s+\[[^]]*\]\s+(\d+) shard", inspect, re.M)
            print(f"{layout}: the tied embedding is saved in {embedding} shard(s)")
            if embedding != ["1"]:
                failures.append(f"{layout}: tied embedding saved as {embedding} shards\n{inspect}")
        resume(work, layout, ckpt, f"{layout}_same")
        check_same_text(work, f"{layout} -> {layout}", f"{layout}_full", f"{layout}_same")


def stop_with_sigterm(work):
    """A long 2-rank run, SIGTERM to mpirun once steps are running."""
    ckpt, metrics = f"{work}/sigterm_ckpt", f"{work}/sigterm.jsonl"
    cmd = ["mpirun", "--oversubscribe", "-np", "2", TETRA, "train", "--config", "/dev/null"]
    for s in MODEL + ["optimizer.zero_stage=1", "train.steps=20000", "checkpoint.interval=0",
                      f"log.metrics_path={metrics}", f"checkpoint.dir={ckpt}"]:
        cmd += ["--set", s]
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Until 3 steps are written, however long a loaded machine takes (ctest's
    # TIMEOUT bounds a run that hangs), or the job ends by itself (a failure).
    while job.poll() is None and (not os.path.exists(metrics) or sum(1 for _ in open(metrics)) < 3):
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
    moe_checks(work)
    stop_with_sigterm(work)
    single, _ = saved_at_10(work, "single")
    for layout in ["tp2_dp2_zero1", "tp2_dp2_zero1_bf16", "pp2_dp2_zero1"]:
        full, ckpt = saved_at_10(work, layout)
        check(f"{layout} -> {layout}", resume(work, layout, ckpt, f"{layout}_same"), full, 0.0)
        if layout == "tp2_dp2_zero1":
            for target in ["pp2_dp2_zero1", "single", "dp4_zero0"]:
                name = f"{layout}_to_{target}"
                check(f"{layout} -> {target}", resume(work, target, ckpt, name), single, RESHARD_RTOL)
            # Restored on one rank, no step run: the weights exactly as saved. The
            # vocabulary of 64 is padded to 128 x tp rows: under tp 2 the second
            # rank's embedding and head slices are padding only, saved as nothing.
            copy = f"{work}/{layout}_restore_ckpt"
            shutil.copytree(ckpt, copy)
            train(work, "single", copy, f"{layout}_restore",
                  ["train.steps=10", f"export_path={work}/{layout}_restore_export"])
            check_same_tensors(f"{layout} -> single restored at step 10 vs checkpoint export",
                               f"{work}/{layout}_restore_export/model.safetensors",
                               export_checkpoint(work, f"{ckpt}/step_00000010"), moe=False)
    _, ckpt = saved_at_10(work, "dp4_zero1")
    check("dp4_zero1 -> tp2_dp2_zero0", resume(work, "tp2_dp2_zero0", ckpt, "dp4_to_tp2"), single,
          RESHARD_RTOL)

if failures:
    sys.exit("FAIL:\n  " + "\n  ".join(failures))
print("PASS")
