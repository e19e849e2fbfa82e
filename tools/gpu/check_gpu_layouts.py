#!/usr/bin/python3
"""The device path against the CPU oracle, on one GPU (run by run_gpu_checks.sh).

layouts: every layout family trains on CUDA in bf16, its ranks sharing the
  GPU through the staged backend (parallel.comm_backend MPI, which keeps
  NCCL's rules), and is compared with the CPU fp32 single-rank run of the
  same model and data: tp 2 with sequence parallelism, pp 2 under 1F1B,
  interleaved (2 virtual stages), ZB-H1 and DualPipeV, dp 2 with ZeRO-1, cp 2
  (ring attention), for the MoE model dp 2 x ep 2, cp 2 x ep 2, DualPipeV pp 2
  x ep 2 and tp 2 x pp 2 x dp 2 x ep 2 on 8 processes, and dp 2 x ep 2 of
  the MoE model with MLA and multi-token prediction. Tolerance: bf16
  activations (2^-8 relative per rounding) move these tiny models' step-1
  loss by ~3e-5, their gradient norm by ~2e-4 and the 8-step curve by ~1e-3
  (measured with this script on CPU ranks, which compute bf16 as the GPU
  does); the bounds leave the GPU's other summation orders (cuBLAS, fused
  attention) 10x more. A message matched to the wrong micro-batch, a
  gradient summed over the wrong group or a token sent to the wrong expert
  moves them by ~1e-1. Every step of every layout reports device_mallocs 0:
  its memory comes from the stream-ordered pool, never from a cudaMalloc or
  cudaFree that waits for the device.
checkpoints: a GPU run's checkpoint resumes on the CPU and a CPU run's on
  the GPU; the weights each exports at once equal the saving run's export
  bit for bit (fp32 state moves through page-locked host memory unchanged).

usage: check_gpu_layouts.py TETRA OUT {layouts|checkpoints} [SECONDS] [--emulated]
--emulated: TETRA is build/tetra_emu (the emulated GPU, emulator/): every
layout runs twice, through the staged backend and through NCCL (one emulated
GPU per rank), for STEPS_EMULATED steps (the emulator runs a CUDA thread per
fiber: each step costs seconds).
Prints one line per check, with the differences and the seconds its runs took,
and goes on after a check fails: a run that exits non-zero, times out or
writes no metrics is a FAIL line naming the layout with the last lines of its
output. Each run has at most RUN_TIMEOUT_S seconds; once SECONDS (default
unbounded) are spent, the checks not yet run are FAIL lines saying so, so the
caller's own timeout never cuts the account short. Exit status 1 if any
check failed.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "testing"))
from tetra_runs import ENV, Checker, max_abs_difference, read_safetensors, rel  # noqa: E402

EMULATED = "--emulated" in sys.argv
args = [a for a in sys.argv[1:] if a != "--emulated"]
TETRA, OUT, PART = args[0], args[1], args[2]
DEADLINE = time.monotonic() + float(args[3]) if len(args) > 3 else float("inf")
RUN_TIMEOUT_S = 240 if EMULATED else 60
COMMON = ["model.vocab_size=64", "model.hidden_size=64", "model.num_hidden_layers=4",
          "model.num_attention_heads=4", "model.num_key_value_heads=2", "model.intermediate_size=128",
          "train.global_batch_size=16", "train.micro_batch_size=2", "train.seq_length=32",
          "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2", "data.synthetic.order=1",
          "log.interval=1000"]
MOE = ["model.moe.n_routed_experts=8", "model.moe.num_experts_per_tok=2", "model.moe.n_shared_experts=1",
       "model.moe.moe_intermediate_size=32", "model.moe.first_k_dense_replace=1", "model.moe.n_group=2",
       "model.moe.topk_group=1", "model.moe.routed_scaling_factor=2.5", "model.moe.aux_loss_alpha=0.01",
       "model.moe.bias_update_speed=0.01"]
# DeepSeek-V3's attention (MLA) and multi-token prediction, on the MoE model.
MLA_MTP = ["model.q_lora_rank=48", "model.kv_lora_rank=32", "model.qk_nope_head_dim=16",
           "model.qk_rope_head_dim=8", "model.v_head_dim=16", "model.num_nextn_predict_layers=1",
           "train.mtp_loss_scaling_factor=0.3"]
STEPS = 3 if EMULATED else 8
# Relative: step-1 loss, step-1 gradient norm, every step's loss.
RTOL = (5e-3, 3e-2, 2e-2)
# On the emulator a deadlock (an ungrouped NCCL pair) is named by the
# watchdog well inside RUN_TIMEOUT_S.
GPU = ["train.device=CUDA", "train.precision=BF16"] + (["parallel.comm_timeout_s=120"] if EMULATED else [])
# The staged backend shares one GPU among the ranks; the emulator also has a
# GPU per rank for NCCL.
BACKENDS = [("staged", "MPI")] + ([("NCCL", "NCCL")] if EMULATED else [])
CPU = ["train.device=CPU", "train.precision=FP32"]

check = Checker()


class RunFailed(Exception):
    pass


# mpirun's closing words, which say nothing of the failure.
MPIRUN_NOISE = re.compile(r"^-+$|Process name:|Exit code:|Primary job|non-zero exit code|Per user-direction|"
                          r"mpirun detected|causing$|the job to be terminated|The first process to do so")


def tail(text, lines=3):
    """The first error line of a run's output (mpirun's own closing words come
    last), then its last lines."""
    kept = [line.strip() for line in text.splitlines() if line.strip() and not MPIRUN_NOISE.search(line)]
    first = next((line for line in kept if re.search(r"error|Check failed|terminate|Abort|fatal", line, re.I)), None)
    shown = ([first] if first else []) + kept[-lines:]
    return " | ".join(dict.fromkeys(shown))[:600]  # each once: the ranks say the same


def run(name, ranks, sets, steps=None):
    """`tetra train` on `ranks` ranks (mpirun from PATH for several) with
    COMMON + `sets`; returns (metrics, out dir, seconds); raises RunFailed
    saying why when it fails, times out or writes fewer than `steps` lines."""
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    metrics = os.path.join(out, "metrics.jsonl")
    cmd = [TETRA, "train", "--config", "/dev/null"]
    for s in COMMON + sets + [f"log.metrics_path={metrics}"]:
        cmd += ["--set", s]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    left = DEADLINE - time.monotonic()
    if left < 5:
        raise RunFailed("not run: the part's time was spent")
    timeout = min(RUN_TIMEOUT_S, left)
    start = time.monotonic()
    try:
        # A session of its own: a timeout ends mpirun's ranks too, not only mpirun.
        proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except OSError as e:
        raise RunFailed(f"could not start {cmd[0]}: {e}")
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise RunFailed(f"timed out after {timeout:.0f} s: {tail(output)}")
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RunFailed(f"exit {proc.returncode} after {seconds:.0f} s: {tail(output)}")
    try:
        with open(metrics) as f:
            got = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise RunFailed(f"exit 0 but no metrics ({e}): {tail(output)}")
    if steps is not None and len(got) < steps:
        raise RunFailed(f"{len(got)} of {steps} metrics lines: {tail(output)}")
    return got, out, seconds


def layouts():
    dense = [("tp2_sp", 2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
             ("pp2_1f1b", 2, ["parallel.pipeline=2"]),
             ("pp2_interleaved", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"]),
             ("pp2_zb_h1", 2, ["parallel.pipeline=2", "parallel.schedule=ZB_H1"]),
             ("pp2_dualpipe_v", 2, ["parallel.pipeline=2", "parallel.schedule=DUALPIPE_V",
                                    "parallel.virtual_stages=2"]),
             ("dp2_zero1", 2, ["parallel.data=2", "optimizer.zero_stage=1"]),
             ("cp2_ring", 2, ["parallel.context=2"])]
    moe = [("moe_dp2_ep2", 2, ["parallel.expert=2"]),
           ("moe_cp2_ep2", 2, ["parallel.context=2", "parallel.expert=2"]),
           ("moe_pp2_dualpipe_v_ep2", 4, ["parallel.pipeline=2", "parallel.schedule=DUALPIPE_V",
                                          "parallel.virtual_stages=2", "parallel.expert=2"]),
           ("moe_tp2_pp2_dp2_ep2", 8, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.expert=2"])]
    mla_mtp = [("mla_moe_mtp_dp2_ep2", 2, ["parallel.expert=2"])]
    for ref_name, model, cases in (("cpu_ref", [], dense), ("cpu_ref_moe", MOE, moe),
                                   ("cpu_ref_mla_moe_mtp", MOE + MLA_MTP, mla_mtp)):
        try:
            ref, _, _ = run(ref_name, 1, model + CPU + [f"train.steps={STEPS}"], STEPS)
        except RunFailed as e:
            ref = None
            check(False, f"CPU fp32 reference {ref_name}: {e}")
        for (name, ranks, sets), (backend, comm) in ((c, b) for c in cases for b in BACKENDS):
            what = f"{name} (GPU bf16, {ranks} ranks, {backend})"
            try:
                got, _, seconds = run(f"{name}_{backend}", ranks,
                                      model + GPU + sets + [f"parallel.comm_backend={comm}", f"train.steps={STEPS}"],
                                      STEPS)
            except RunFailed as e:
                check(False, f"{what}: {e}")
                continue
            except Exception as e:  # noqa: BLE001: a bug here must not stop the other layouts
                check(False, f"{what}: {type(e).__name__}: {e}")
                continue
            if ref is None:
                check(False, f"{what}: ran ({seconds:.0f} s, step-1 loss {got[0]['loss']:.6f}), "
                      f"but the CPU reference {ref_name} failed")
                continue
            # No step may wait for the device to allocate or free memory.
            mallocs = [g.get("device_mallocs") for g in got]
            check(all(m == 0 for m in mallocs),
                  f"{what}: cudaMalloc/cudaFree calls per step {mallocs} (every step must take memory from the pool)")
            loss1, norm1 = rel(got[0]["loss"], ref[0]["loss"]), rel(got[0]["grad_norm"], ref[0]["grad_norm"])
            curve = max(rel(g["loss"], r["loss"]) for g, r in zip(got, ref))
            check(len(got) == STEPS and loss1 <= RTOL[0] and norm1 <= RTOL[1] and curve <= RTOL[2],
                  f"{what} vs CPU fp32: step-1 loss {got[0]['loss']:.6f} vs "
                  f"{ref[0]['loss']:.6f} ({loss1:.1e}), grad norm {norm1:.1e}, {STEPS}-step curve {curve:.1e}"
                  f" ({seconds:.0f} s)")


def checkpoints():
    for saver, loader in ((["train.device=CUDA", "train.precision=FP32"], ["train.device=CPU"]),
                          (["train.device=CPU"], ["train.device=CUDA", "train.precision=FP32"])):
        name = f"{saver[0].split('=')[1].lower()}_to_{loader[0].split('=')[1].lower()}"
        ckpt = os.path.join(OUT, name, "ckpt")
        saved_sets = ["train.steps=3", f"checkpoint.dir={ckpt}", "checkpoint.interval=3"]
        try:
            half = "saving"
            _, saved, s1 = run(name + "_save", 1, saver + saved_sets + [f"export_path={OUT}/{name}_save/weights"])
            half = "resuming"
            _, loaded, s2 = run(name + "_resume", 1,
                                loader + saved_sets + [f"export_path={OUT}/{name}_resume/weights"])
            half = "comparing"
            diff = max_abs_difference(read_safetensors(f"{saved}/weights/model.safetensors"),
                                      read_safetensors(f"{loaded}/weights/model.safetensors"))
        except RunFailed as e:
            check(False, f"checkpoint {name}, {half} run: {e}")
            continue
        except Exception as e:  # noqa: BLE001: a bug here must not stop the other direction
            check(False, f"checkpoint {name}, {half}: {type(e).__name__}: {e}")
            continue
        check(diff == 0, f"checkpoint {name}: weights after resuming differ from the saving run's by {diff:g}"
              f" ({s1 + s2:.0f} s)")


{"layouts": layouts, "checkpoints": checkpoints}[PART]()
check.exit(f"{PART}: all checks passed")
