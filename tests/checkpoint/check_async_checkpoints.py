#!/usr/bin/python3
"""Asynchronous checkpoints (checkpoint.async) against synchronous ones.

On one rank and on two (data 2, ZeRO-1: each rank writes its own moments):
  - the same 12-step run saved every 4 steps with async true and false
    writes the same step directories with byte-identical rank data files and
    the same manifest once its copy of checkpoint.async is cleared (protoc
    decodes both); the async checkpoints verify with `tetra checkpoint
    inspect`, the losses are written identically, checkpoint_stall_s is
    reported on the steps after the saving ones, and the async saves of steps
    4 and 8 are committed after a later step (their "checkpoint saved" line
    after the next step's progress line), the sync ones and the last before;
  - a run resumed from the async step-4 checkpoint writes steps 5..12's
    losses as the uninterrupted run does.
SIGTERM to a 2-rank run saving after every step (keep 2) stops it with the
save in flight and the stop's own committed: steps N-1 and N, no .tmp left.
A background write that fails (the rank's data file over a file-size limit,
RLIMIT_FSIZE with SIGXFSZ ignored, so write() returns EFBIG) fails the run
with a message naming the background write, and commits nothing.
SIGKILL while a save is in flight: a one-rank run saving after every step is
frozen (SIGSTOP) and its checkpoint directory read while it stands still; once
that shows step_N.tmp without step_N (step N snapshotted, not committed) the
run is killed (SIGKILL). The newest complete checkpoint must be step N-1, and
the same command resumes from it and writes the uninterrupted run's losses.
No check depends on timing: only how many freezes it takes to find a save in
flight does (a save is in flight through nearly every step).
usage: check_async_checkpoints.py TETRA_BINARY PROTOC
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, run_tetra  # noqa: E402

TETRA, PROTOC = sys.argv[1], sys.argv[2]
PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "proto")
MODEL = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=2",
         "model.num_attention_heads=4", "model.num_key_value_heads=2",
         "model.intermediate_size=64", "train.global_batch_size=8", "train.micro_batch_size=2",
         "train.seq_length=16", "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2",
         "data.synthetic.order=1", "log.interval=1000", "train.steps=12",
         "checkpoint.interval=4", "checkpoint.keep=0"]
LAYOUTS = {1: MODEL, 2: MODEL + ["optimizer.zero_stage=1"]}
# A data file is ~320 KB (27k parameters, weights and two moments in fp32);
# the metrics file and the manifest stay far below this limit.
FILE_SIZE_LIMIT = 64 << 10
failures = []


def command(sets):
    cmd = [TETRA, "train", "--config", "/dev/null"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def train(ranks, sets, ckpt, metrics):
    """The metrics, one dict per step, and the progress output (a line per step)."""
    out = run_tetra(command(LAYOUTS[ranks] + sets + [f"checkpoint.dir={ckpt}", "log.interval=1",
                                                      f"log.metrics_path={metrics}"]), ranks).stdout
    return [json.loads(line) for line in open(metrics)], out


def loss_texts(metrics):
    """Step -> the loss as the metrics file writes it (full round-trip precision)."""
    return dict(re.findall(r'"step": (\d+), "loss": ([^,]+),', open(metrics).read()))


def manifest_text(step_dir, clear_async):
    """The manifest in protobuf text format, its checkpoint.async line removed when asked."""
    with open(f"{step_dir}/manifest.pb", "rb") as f:
        text = subprocess.run([PROTOC, f"-I{PROTO_DIR}", "--decode=tetra.CheckpointManifest",
                               "checkpoint.proto"], stdin=f, capture_output=True, check=True).stdout
    lines = text.decode().splitlines()
    return "\n".join(l for l in lines if not (clear_async and l.strip() == "async: true"))


def compare_directories(name, sync_ckpt, async_ckpt):
    steps = sorted(os.listdir(sync_ckpt))
    if steps != sorted(os.listdir(async_ckpt)) or steps != [f"step_{s:08d}" for s in (4, 8, 12)]:
        failures.append(f"{name}: sync saved {steps}, async {sorted(os.listdir(async_ckpt))}")
        return False
    for step in steps:
        a, b = f"{sync_ckpt}/{step}", f"{async_ckpt}/{step}"
        ranks = sorted(f for f in os.listdir(a) if f.startswith("rank_"))
        same = [f for f in ranks if open(f"{a}/{f}", "rb").read() == open(f"{b}/{f}", "rb").read()]
        manifests_equal = manifest_text(a, False) == manifest_text(b, True)
        async_flag = "async: true" in manifest_text(b, False)
        print(f"{name} {step}: {len(same)}/{len(ranks)} rank files identical, manifests equal "
              f"but for checkpoint.async: {manifests_equal} (async manifest says so: {async_flag})")
        if sorted(os.listdir(a)) != sorted(os.listdir(b)) or same != ranks or not ranks or \
                not manifests_equal or not async_flag:
            failures.append(f"{name} {step}: files {os.listdir(a)} vs {os.listdir(b)}, identical "
                            f"{same}, manifests equal {manifests_equal}, async flag {async_flag}")
    inspect = subprocess.run([TETRA, "checkpoint", "inspect", async_ckpt], capture_output=True,
                             text=True)
    if inspect.returncode != 0:
        failures.append(f"{name}: inspect of the async checkpoint failed:\n{inspect.stderr}")
    return True


def check_stalls(name, metrics, expected):
    stalled = [m["step"] for m in metrics if "checkpoint_stall_s" in m]
    print(f"{name}: checkpoint_stall_s on steps {stalled}")
    if not set(expected) <= set(stalled) or any(m.get("checkpoint_stall_s", 0) < 0 for m in metrics):
        failures.append(f"{name}: checkpoint_stall_s on {stalled}, expected at least {expected}")


def check_commit_steps(name, out, ckpt, asynchronous):
    """A step is logged before its save. The save's "checkpoint saved" line
    comes before the next step's progress line when synchronous, after it
    when asynchronous (committed after a later step); the last step's is
    waited for."""
    for step in (4, 8, 12):
        saved = out.find(f"checkpoint saved to {ckpt}/step_{step:08d}\n")
        logged, next_logged = out.find(f"step {step}/12 "), out.find(f"step {step + 1}/12 ")
        after = asynchronous and step != 12
        if saved < 0 or logged < 0 or saved < logged or \
                (step != 12 and (next_logged < 0 or (saved > next_logged) != after)):
            failures.append(f"{name}: step {step}'s save should be committed after it is logged "
                            f"and {'after' if after else 'before'} the next step is:\n{out}")


def same_as_sync(work, ranks):
    name = f"{ranks} rank(s)"
    ckpt, metrics = f"{work}/ckpt_{ranks}", f"{work}/metrics_{ranks}.jsonl"
    sync, out = train(ranks, [], ckpt, metrics)
    check_stalls(f"{name} sync", sync, [5, 9])
    check_commit_steps(f"{name} sync", out, ckpt, False)
    sync_losses = loss_texts(metrics)
    # The same paths, so that the manifests' configs differ only in checkpoint.async.
    os.rename(ckpt, f"{ckpt}_sync")
    asynchronous, out = train(ranks, ["checkpoint.async=true"], ckpt, metrics)
    check_stalls(f"{name} async", asynchronous, [5, 9])
    check_commit_steps(f"{name} async", out, ckpt, True)
    if loss_texts(metrics) != sync_losses:
        failures.append(f"{name}: async run's losses differ from the sync run's")
    if not compare_directories(name, f"{ckpt}_sync", ckpt):
        return
    # Resume from the async step-4 checkpoint.
    full = loss_texts(metrics)
    for step in ("step_00000008", "step_00000012"):
        shutil.rmtree(f"{ckpt}/{step}")
    train(ranks, ["checkpoint.async=true"], ckpt, metrics)
    resumed = loss_texts(metrics)
    differ = [s for s in full if resumed.get(s) != full[s]]
    print(f"{name}: resumed from the async step 4, losses differ at {differ or 'no step'}")
    if differ or len(resumed) != 12:
        failures.append(f"{name}: resumed from async step 4: steps {sorted(resumed, key=int)}, "
                        f"differ at {differ}")


def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write() instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def failed_write(work):
    ckpt = f"{work}/ckpt_fail"
    cmd = command(MODEL + ["checkpoint.async=true", f"checkpoint.dir={ckpt}",
                           f"log.metrics_path={work}/fail.jsonl"])
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600,
                          preexec_fn=limit_file_size)
    saved = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
    message = "checkpoint.async: the background write of step 4's checkpoint failed"
    print(f"failed background write: exit {done.returncode}, saved {saved}, "
          f"stderr names it: {message in done.stderr}")
    if done.returncode == 0 or message not in done.stderr or \
            any(not s.endswith(".tmp") for s in saved):
        failures.append(f"failed background write: exit {done.returncode}, saved {saved}\n"
                        f"{done.stdout}\n{done.stderr}")


def freeze(pid):
    """SIGSTOPs `pid` and returns once it stands still (or has ended)."""
    os.kill(pid, signal.SIGSTOP)
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "TZX":
        time.sleep(0.001)


def in_flight(ckpt):
    """The step of a save snapshotted but not committed (step_N.tmp, no step_N), or None."""
    names = set(os.listdir(ckpt)) if os.path.isdir(ckpt) else set()
    steps = [int(n[5:-4]) for n in names if n.endswith(".tmp") and n[:-4] not in names]
    return max(steps, default=None)


def kill_in_flight(work):
    ckpt, metrics = f"{work}/ckpt_kill", f"{work}/kill.jsonl"
    # A constant learning rate after warmup: train.steps does not change the math.
    sets = MODEL + ["checkpoint.async=true", "checkpoint.interval=1", "checkpoint.keep=2",
                    "optimizer.min_lr=3e-3", f"checkpoint.dir={ckpt}", f"log.metrics_path={metrics}"]
    job = subprocess.Popen(command(sets + ["train.steps=30000"]), env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step, freezes = None, 0
    # A save is in flight through nearly every step (snapshot after step N,
    # commit after step N+1); none in 1000 freezes means saves are not async.
    while step is None or step < 3:
        if job.poll() is not None or freezes == 1000:
            job.kill()
            failures.append(f"SIGKILL: no save in flight seen in {freezes} freezes "
                            f"(exit {job.poll()})")
            return
        freezes += 1
        freeze(job.pid)
        step = in_flight(ckpt)
        if step is None or step < 3:
            os.kill(job.pid, signal.SIGCONT)
            time.sleep(0.01)
    job.kill()
    job.wait()
    complete = sorted(int(n[5:]) for n in os.listdir(ckpt)
                      if not n.endswith(".tmp") and os.path.exists(f"{ckpt}/{n}/COMPLETE"))
    print(f"SIGKILL with step {step}'s save in flight: complete checkpoints {complete}")
    if not complete or complete[-1] != step - 1:
        failures.append(f"SIGKILL at step {step} in flight: complete checkpoints {complete}")
        return
    last = step + 2
    resumed = run_tetra(command(sets + [f"train.steps={last}"])).stdout
    reference = f"{work}/kill_reference.jsonl"
    run_tetra(command(MODEL + ["optimizer.min_lr=3e-3", f"train.steps={last}",
                               f"log.metrics_path={reference}"]))
    a, b = loss_texts(reference), loss_texts(metrics)
    differ = [s for s in a if b.get(s) != a[s]]
    picked = f"(step {step - 1})" in resumed
    print(f"SIGKILL: resumed from step {step - 1}: {picked}; steps 1..{last} differ at "
          f"{differ or 'no step'}")
    if not picked or differ or len(b) != last:
        failures.append(f"SIGKILL: resume picked step {step - 1}: {picked}; differ at {differ}; "
                        f"steps {sorted(b, key=int)}\n{resumed}")


def stop_with_sigterm(work):
    """A 2-rank run saving after every step, SIGTERM to mpirun once steps run:
    it stops cleanly with the save in flight and the stop's own committed."""
    ckpt, metrics = f"{work}/ckpt_sigterm", f"{work}/sigterm.jsonl"
    cmd = ["mpirun", "--oversubscribe", "-np", "2"] + command(
        LAYOUTS[2] + ["checkpoint.async=true", "checkpoint.interval=1", "checkpoint.keep=2",
                      "train.steps=30000", f"checkpoint.dir={ckpt}", f"log.metrics_path={metrics}"])
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Until 3 steps are written, however long a loaded machine takes.
    while job.poll() is None and (not os.path.exists(metrics) or sum(1 for _ in open(metrics)) < 3):
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=300)
    stopped = re.search(r"stopped by SIGTERM after step (\d+)", out)
    saved = sorted(n for n in os.listdir(ckpt) if n.startswith("step_"))
    step = int(stopped.group(1)) if stopped else 0
    print(f"SIGTERM: stopped after step {step}, saved {saved}")
    if not stopped or step < 2 or saved != [f"step_{s:08d}" for s in (step - 1, step)]:
        failures.append(f"SIGTERM: stopped after step {step}, saved {saved}\n{out}")


with tempfile.TemporaryDirectory() as work:
    for ranks in (1, 2):
        same_as_sync(work, ranks)
    failed_write(work)
    kill_in_flight(work)
    stop_with_sigterm(work)

if failures:
    sys.exit("FAIL:\n  " + "\n  ".join(failures))
print("PASS")
